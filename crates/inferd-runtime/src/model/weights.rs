//! The decoder's weights: every tensor checked against the config's shapes
//! (errors name the file and tensor), then handed to the backend. Projections
//! that read the same input (Q|K|V, gate|up) are fused into one matrix when
//! their stored types agree, so one pass over the activations serves them all.

use super::config::{LayerKind, ModelConfig};
use super::names::{Global, Layer, Naming};
use crate::backend::{Backend, SharedSource};
use crate::Result;

/// Several output projections of one input, evaluated as few matmuls as the
/// stored types allow. Outputs come back in declaration order.
pub struct Projection<W> {
    /// Each group is one matmul: (weight, optional bias, widths of its outputs).
    pub groups: Vec<(W, Option<W>, Vec<usize>)>,
}

impl<W> Projection<W> {
    /// The one weight (and bias) of a projection fused into a single matmul of `outputs`
    /// outputs; `None` when it is split over several.
    pub fn fused(&self, outputs: usize) -> Option<(&W, Option<&W>)> {
        match self.groups.as_slice() {
            [(w, bias, widths)] if widths.len() == outputs => Some((w, bias.as_ref())),
            _ => None,
        }
    }
}

/// One decoder layer: a token mixer of the layer's kind between pre-norms, then the
/// SwiGLU feed-forward.
pub struct LayerWeights<W> {
    /// RMSNorm before the mixer.
    pub attn_norm: W,
    pub mixer: Mixer<W>,
    pub ffn_norm: W,
    pub gate_up: Projection<W>,
    pub down: W,
}

/// The token mixer of a layer, by [`super::LayerKind`].
pub enum Mixer<W> {
    FullAttention(AttentionWeights<W>),
    LinearAttention(DeltaNetWeights<W>),
}

/// A Gated DeltaNet (see `model::delta_net`).
pub struct DeltaNetWeights<W> {
    /// Q|K|V `[conv_dim]`, z `[value_dim]`, b and a `[n_v_heads]` from the layer input.
    pub in_proj: Projection<W>,
    /// The depthwise convolution's kernel.  // [conv_dim * taps]
    pub conv: W,
    pub a_log: W,   // [n_v_heads]
    pub dt_bias: W, // [n_v_heads]
    /// The gated RMSNorm's weight (plain, not zero-centred).  // [v_head_dim]
    pub norm: W,
    pub out: W, // [hidden, value_dim]
}

/// Softmax attention: fused Q|K|V (Q with its output gate when the model has one),
/// optional per-head norms (Qwen3, Qwen3.5), output projection.
pub struct AttentionWeights<W> {
    pub qkv: Projection<W>,
    pub q_norm: Option<W>,
    pub k_norm: Option<W>,
    pub o: W,
    /// `o_proj`'s bias (`ModelConfig::o_bias`).
    pub o_bias: Option<W>,
}

pub struct Weights<W> {
    pub embed: W,
    pub layers: Vec<LayerWeights<W>>,
    pub final_norm: W,
    /// `None` when tied to `embed`.
    pub lm_head: Option<W>,
}

struct Loader<'a, B: Backend> {
    backend: &'a B,
    src: &'a SharedSource,
    naming: Naming,
}

impl<B: Backend> Loader<'_, B> {
    /// Checks the shape of `name`, then loads it.
    fn one(&self, name: &str, shape: &[usize]) -> Result<B::Weight> {
        self.src.tensor(name)?.expect_shape(shape)?;
        self.backend.load_weight(self.src, &[name])
    }

    /// Checks the shape of `name`, then loads its values as a vector plus `add`.
    fn vector(&self, name: &str, shape: &[usize], add: f32) -> Result<B::Weight> {
        self.src.tensor(name)?.expect_shape(shape)?;
        self.backend.load_vector(self.src, name, add)
    }

    /// An RMSNorm weight `[dim]`, zero-centred ones offset to the scale they apply.
    fn norm(&self, name: &str, dim: usize, c: &ModelConfig) -> Result<B::Weight> {
        if c.norm_offset == 0.0 {
            self.one(name, &[dim])
        } else {
            self.vector(name, &[dim], c.norm_offset)
        }
    }

    /// Loads projections (name, bias name, output width) sharing `in_dim`, fusing runs of equal dtype.
    fn projection(
        &self,
        parts: &[(String, Option<String>, usize)],
        in_dim: usize,
    ) -> Result<Projection<B::Weight>> {
        let mut dtypes = Vec::new();
        for (name, bias, width) in parts {
            let t = self.src.tensor(name)?;
            t.expect_shape(&[*width, in_dim])?;
            dtypes.push(t.dtype);
            if let Some(b) = bias {
                self.src.tensor(b)?.expect_shape(&[*width])?;
            }
        }
        let mut groups = Vec::new();
        let mut i = 0;
        while i < parts.len() {
            let mut j = i + 1;
            while j < parts.len() && dtypes[j] == dtypes[i] {
                j += 1;
            }
            let names: Vec<&str> = parts[i..j].iter().map(|p| p.0.as_str()).collect();
            let w = self.backend.load_weight(self.src, &names)?;
            let bias_names: Vec<&str> = parts[i..j].iter().filter_map(|p| p.1.as_deref()).collect();
            let bias = if bias_names.is_empty() {
                None
            } else {
                Some(self.backend.load_weight(self.src, &bias_names)?)
            };
            groups.push((w, bias, parts[i..j].iter().map(|p| p.2).collect()));
            i = j;
        }
        Ok(Projection { groups })
    }

    fn layer(&self, i: usize, c: &ModelConfig) -> Result<LayerWeights<B::Weight>> {
        let n = |t: Layer| self.naming.layer(i, t);
        let mixer = match c.layer_kinds[i] {
            LayerKind::FullAttention => Mixer::FullAttention(self.attention(i, c)?),
            LayerKind::LinearAttention => Mixer::LinearAttention(self.delta_net(i, c)?),
        };
        Ok(LayerWeights {
            attn_norm: self.norm(&n(Layer::AttnNorm), c.hidden, c)?,
            mixer,
            ffn_norm: self.norm(&n(Layer::FfnNorm), c.hidden, c)?,
            gate_up: self.projection(
                &[
                    (n(Layer::Gate), None, c.ffn_dim),
                    (n(Layer::Up), None, c.ffn_dim),
                ],
                c.hidden,
            )?,
            down: self.one(&n(Layer::Down), &[c.hidden, c.ffn_dim])?,
        })
    }

    fn attention(&self, i: usize, c: &ModelConfig) -> Result<AttentionWeights<B::Weight>> {
        let n = |t: Layer| self.naming.layer(i, t);
        let bias = |t: Layer| if c.qkv_bias { Some(n(t)) } else { None };
        Ok(AttentionWeights {
            qkv: self.projection(
                &[
                    (n(Layer::Q), bias(Layer::QBias), c.q_proj_dim()),
                    (n(Layer::K), bias(Layer::KBias), c.kv_dim()),
                    (n(Layer::V), bias(Layer::VBias), c.kv_dim()),
                ],
                c.hidden,
            )?,
            q_norm: if c.qk_norm {
                Some(self.norm(&n(Layer::QNorm), c.head_dim, c)?)
            } else {
                None
            },
            k_norm: if c.qk_norm {
                Some(self.norm(&n(Layer::KNorm), c.head_dim, c)?)
            } else {
                None
            },
            o: self.one(&n(Layer::O), &[c.hidden, c.q_dim()])?,
            o_bias: if c.o_bias {
                Some(self.one(&n(Layer::OBias), &[c.hidden])?)
            } else {
                None
            },
        })
    }

    fn delta_net(&self, i: usize, c: &ModelConfig) -> Result<DeltaNetWeights<B::Weight>> {
        let n = |t: Layer| self.naming.layer(i, t);
        let la = c.linear.as_ref().ok_or_else(|| {
            crate::RuntimeError::Other(format!("layer {i}: linear attention without its config"))
        })?;
        Ok(DeltaNetWeights {
            in_proj: self.projection(
                &[
                    (n(Layer::LinQkv), None, la.conv_dim()),
                    (n(Layer::LinZ), None, la.value_dim()),
                    (n(Layer::LinB), None, la.n_v_heads),
                    (n(Layer::LinA), None, la.n_v_heads),
                ],
                c.hidden,
            )?,
            conv: self.vector(&n(Layer::LinConv), &[la.conv_dim(), 1, la.conv_kernel], 0.0)?,
            a_log: self.vector(&n(Layer::LinALog), &[la.n_v_heads], 0.0)?,
            dt_bias: self.vector(&n(Layer::LinDtBias), &[la.n_v_heads], 0.0)?,
            norm: self.vector(&n(Layer::LinNorm), &[la.v_head_dim], 0.0)?,
            out: self.one(&n(Layer::LinOut), &[c.hidden, la.value_dim()])?,
        })
    }
}

impl<W> Weights<W> {
    pub fn load<B: Backend<Weight = W>>(
        backend: &B,
        src: &SharedSource,
        naming: Naming,
        c: &ModelConfig,
    ) -> Result<Self> {
        let l = Loader {
            backend,
            src,
            naming,
        };
        let layers = (0..c.n_layers)
            .map(|i| l.layer(i, c))
            .collect::<Result<Vec<_>>>()?;
        Ok(Weights {
            embed: l.one(&naming.global(Global::Embed), &[c.vocab_size, c.hidden])?,
            layers,
            final_norm: l.norm(&naming.global(Global::FinalNorm), c.hidden, c)?,
            lm_head: if c.tied_embeddings {
                None
            } else {
                Some(l.one(&naming.global(Global::LmHead), &[c.vocab_size, c.hidden])?)
            },
        })
    }
}
