//! Architecture-agnostic model configuration, read from GGUF metadata or an HF
//! `config.json`.

use inferd_formats::{GgufFile, HfConfig};

use crate::backend::{RopeConfig, RopeStyle};
use crate::{Result, RuntimeError};

/// Decoder families inferd runs. They share one layer structure and differ in flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2/3, SmolLM2: RMSNorm, RoPE, GQA, SwiGLU.
    Llama,
    /// Qwen2 / Qwen2.5: Llama + biases on Q, K, V.
    Qwen2,
    /// Qwen3 dense: Llama + RMSNorm on each head of Q and K before RoPE.
    Qwen3,
    /// Qwen3.5 hybrid (HF `qwen3_5`): Gated DeltaNet layers between gated full-attention
    /// layers (QK-norm, partial rotary, a sigmoid output gate), zero-centred RMSNorm
    /// weights (`x̂ · (1 + w)`).
    Qwen35,
}

impl Arch {
    pub fn parse(name: &str) -> Option<Arch> {
        match name {
            "llama" | "LlamaForCausalLM" => Some(Arch::Llama),
            "qwen2" | "Qwen2ForCausalLM" => Some(Arch::Qwen2),
            "qwen3" | "Qwen3ForCausalLM" => Some(Arch::Qwen3),
            // `qwen35`: llama.cpp's name (GGUF `general.architecture`).
            "qwen35"
            | "qwen3_5"
            | "qwen3_5_text"
            | "Qwen3_5ForCausalLM"
            | "Qwen3_5ForConditionalGeneration" => Some(Arch::Qwen35),
            _ => None,
        }
    }

    pub fn has_qkv_bias(self) -> bool {
        self == Arch::Qwen2
    }

    pub fn has_qk_norm(self) -> bool {
        matches!(self, Arch::Qwen3 | Arch::Qwen35)
    }

    /// What the stored RMSNorm weights are offset by: the norm scales by `offset + w`
    /// (Qwen3.5's zero-centred norms: 1; the others: 0).
    pub fn norm_offset(self) -> f32 {
        if self == Arch::Qwen35 {
            1.0
        } else {
            0.0
        }
    }
}

/// How a decoder layer mixes information across tokens (HF `layer_types`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Softmax attention over the paged KV cache.
    FullAttention,
    /// Linear attention with a fixed-size recurrent state (Gated DeltaNet, in hybrid
    /// models such as Qwen3.5; its dimensions in [`LinearAttnConfig`]).
    LinearAttention,
}

impl LayerKind {
    pub fn parse(name: &str) -> Option<LayerKind> {
        match name {
            "full_attention" | "attention" => Some(LayerKind::FullAttention),
            // transformers remaps the legacy "mamba" name the same way.
            "linear_attention" | "mamba" => Some(LayerKind::LinearAttention),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LayerKind::FullAttention => "full_attention",
            LayerKind::LinearAttention => "linear_attention",
        }
    }
}

/// The Gated DeltaNet of the linear-attention layers (HF `linear_*` fields).
///
/// Q and K have `n_k_heads` heads of `k_head_dim`, V (and the output, and the z gate)
/// `n_v_heads` heads of `v_head_dim`; each key head serves `n_v_heads / n_k_heads`
/// consecutive value heads. The causal depthwise convolution runs over Q|K|V
/// (`conv_dim` channels) with `conv_kernel` taps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearAttnConfig {
    pub n_k_heads: usize,
    pub n_v_heads: usize,
    pub k_head_dim: usize,
    pub v_head_dim: usize,
    pub conv_kernel: usize,
}

impl LinearAttnConfig {
    pub fn key_dim(&self) -> usize {
        self.n_k_heads * self.k_head_dim
    }

    pub fn value_dim(&self) -> usize {
        self.n_v_heads * self.v_head_dim
    }

    /// Channels of the convolution: Q|K|V.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// Inputs the convolution keeps between passes: the last `conv_kernel - 1` rows of
    /// Q|K|V.  // [conv_kernel - 1, conv_dim]
    pub fn conv_state_elems(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_dim()
    }

    /// The delta rule's state: one `[k_head_dim, v_head_dim]` matrix per value head.
    pub fn delta_state_elems(&self) -> usize {
        self.n_v_heads * self.k_head_dim * self.v_head_dim
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub rms_eps: f32,
    pub rope: RopeConfig,
    /// Q/K/V projections carry biases (Qwen2; also HF `attention_bias`).
    pub qkv_bias: bool,
    /// The attention output projection carries a bias (Qwen3.5 with `attention_bias`).
    pub o_bias: bool,
    pub qk_norm: bool,
    /// The output projection reuses the token embedding (no separate lm_head tensor).
    pub tied_embeddings: bool,
    pub max_context: usize,
    /// What each decoder layer is.  // [n_layers]
    pub layer_kinds: Vec<LayerKind>,
    /// RMSNorm weights are stored minus this: every norm (layers, QK-norm, final) scales
    /// by `norm_offset + w` (Qwen3.5: 1; others 0). The gated norm of a DeltaNet is
    /// plain.
    pub norm_offset: f32,
    /// Attention's Q projection also yields a per-head output gate (`q_proj` is
    /// `[n_heads * 2 * head_dim, hidden]`, each head's query then its gate), and the
    /// attention output is multiplied by `sigmoid(gate)` before `o_proj` (Qwen3.5).
    pub attn_output_gate: bool,
    /// The Gated DeltaNet of linear-attention layers (hybrid models only).
    pub linear: Option<LinearAttnConfig>,
}

impl ModelConfig {
    /// Layers that keep KV in the paged pool (full attention), in layer order.
    pub fn kv_layer_count(&self) -> usize {
        self.layer_kinds
            .iter()
            .filter(|k| **k == LayerKind::FullAttention)
            .count()
    }

    /// The pool layer holding decoder layer `layer`'s KV (`None`: it keeps none).
    pub fn kv_layer(&self, layer: usize) -> Option<usize> {
        (self.layer_kinds.get(layer) == Some(&LayerKind::FullAttention)).then(|| {
            self.layer_kinds[..layer]
                .iter()
                .filter(|k| **k == LayerKind::FullAttention)
                .count()
        })
    }

    /// The attention geometry of a full-attention layer.
    pub fn attn_config(&self) -> crate::backend::AttnConfig {
        crate::backend::AttnConfig {
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
        }
    }

    /// Layers with a recurrent state (linear attention), in layer order.
    pub fn state_layer_count(&self) -> usize {
        self.n_layers - self.kv_layer_count()
    }

    /// The state-pool layer of decoder layer `layer` (`None`: it keeps no state).
    pub fn state_layer(&self, layer: usize) -> Option<usize> {
        (self.layer_kinds.get(layer) == Some(&LayerKind::LinearAttention)).then(|| {
            self.layer_kinds[..layer]
                .iter()
                .filter(|k| **k == LayerKind::LinearAttention)
                .count()
        })
    }

    /// Width of the Q projection: the queries, and as much again for the output gate.
    pub fn q_proj_dim(&self) -> usize {
        self.q_dim() * if self.attn_output_gate { 2 } else { 1 }
    }

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Reads `{arch}.*` keys of a GGUF file (a Qwen3.5 hybrid's also through
    /// `gguf_qwen35`). `tied` is decided by the loader (no `output.weight`).
    pub fn from_gguf(g: &GgufFile, tied_embeddings: bool) -> Result<Self> {
        let path = g.path().display().to_string();
        let arch_name = g.meta_str("general.architecture")?;
        let arch = Arch::parse(arch_name).ok_or_else(|| RuntimeError::UnsupportedArch {
            path: path.clone(),
            arch: arch_name.to_string(),
        })?;
        let k = |s: &str| format!("{arch_name}.{s}");
        let hidden = g.meta_u64(&k("embedding_length"))? as usize;
        let n_heads = g.meta_u64(&k("attention.head_count"))? as usize;
        let n_kv_heads = g
            .opt_u64(&k("attention.head_count_kv"))?
            .map(|v| v as usize)
            .unwrap_or(n_heads);
        let head_dim = match g.opt_u64(&k("attention.key_length"))? {
            Some(v) => v as usize,
            None if n_heads > 0 => hidden / n_heads,
            None => 0,
        };
        let rotary_dim = g
            .opt_u64(&k("rope.dimension_count"))?
            .map(|v| v as usize)
            .unwrap_or(head_dim);
        let vocab_size = match g.opt_u64(&k("vocab_size"))? {
            Some(v) => v as usize,
            None => {
                let t = g.tensor("token_embd.weight")?;
                *t.shape.first().ok_or_else(|| RuntimeError::BadConfig {
                    path: path.clone(),
                    reason: "token_embd.weight has no dimensions".into(),
                })?
            }
        };
        let n_layers = g.meta_u64(&k("block_count"))? as usize;
        // Before anything is sized by them.
        check_sizes(
            &path,
            &[
                (&k("block_count"), n_layers, MAX_LAYERS),
                (&k("embedding_length"), hidden, MAX_WIDTH),
                (&k("attention.head_count"), n_heads, MAX_HEADS),
                (&k("attention.head_count_kv"), n_kv_heads, MAX_HEADS),
                (&k("attention.key_length"), head_dim, MAX_HEAD_DIM),
                (&k("vocab_size"), vocab_size, MAX_VOCAB),
            ],
        )?;
        if g.opt_u64(&k("attention.key_length"))?.is_none()
            && n_heads > 0
            && !hidden.is_multiple_of(n_heads)
        {
            return Err(RuntimeError::BadConfig {
                path,
                reason: format!(
                    "{} {hidden} is not a multiple of {} {n_heads} (and {} is absent)",
                    k("embedding_length"),
                    k("attention.head_count"),
                    k("attention.key_length")
                ),
            });
        }
        let mut cfg = ModelConfig {
            arch,
            vocab_size,
            hidden,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim: g.meta_u64(&k("feed_forward_length"))? as usize,
            rms_eps: g.meta_f32(&k("attention.layer_norm_rms_epsilon"))?,
            rope: RopeConfig {
                theta: g.opt_f32(&k("rope.freq_base"))?.unwrap_or(10000.0),
                rotary_dim,
                // llama.cpp's converter permutes Llama Q/K rows for the interleaved style.
                style: if arch == Arch::Llama {
                    RopeStyle::Interleaved
                } else {
                    RopeStyle::Neox
                },
            },
            qkv_bias: arch.has_qkv_bias(),
            o_bias: false,
            qk_norm: arch.has_qk_norm(),
            tied_embeddings,
            max_context: g
                .opt_u64(&k("context_length"))?
                .map(|v| v as usize)
                .unwrap_or(4096),
            layer_kinds: vec![LayerKind::FullAttention; n_layers],
            norm_offset: 0.0,
            attn_output_gate: false,
            linear: None,
        };
        if let Some(t) = g.opt_str(&k("rope.scaling.type"))? {
            if t != "none" {
                return Err(RuntimeError::BadConfig {
                    path,
                    reason: format!("rope scaling '{t}' is not supported yet"),
                });
            }
        }
        if arch == Arch::Qwen35 {
            super::gguf_qwen35::apply(g, arch_name, &mut cfg)?;
        }
        cfg.check(&path)?;
        Ok(cfg)
    }

    pub fn from_hf(c: &HfConfig, path: &str) -> Result<Self> {
        let arch_name = c
            .architectures
            .as_ref()
            .and_then(|a| a.first().cloned())
            .or_else(|| c.model_type.clone())
            .unwrap_or_default();
        let arch = Arch::parse(&arch_name)
            .or_else(|| c.model_type.as_deref().and_then(|m| Arch::parse(m)))
            .ok_or_else(|| RuntimeError::UnsupportedArch {
                path: path.to_string(),
                arch: arch_name.clone(),
            })?;
        // Before anything is sized by them.
        check_sizes(
            path,
            &[
                ("num_hidden_layers", c.num_hidden_layers, MAX_LAYERS),
                ("hidden_size", c.hidden_size, MAX_WIDTH),
                ("num_attention_heads", c.num_attention_heads, MAX_HEADS),
                ("vocab_size", c.vocab_size, MAX_VOCAB),
                ("intermediate_size", c.intermediate_size, MAX_WIDTH * 8),
            ],
        )?;
        if arch != Arch::Qwen35
            && c.head_dim.is_none()
            && c.num_attention_heads > 0
            && !c.hidden_size.is_multiple_of(c.num_attention_heads)
        {
            return Err(RuntimeError::BadConfig {
                path: path.into(),
                reason: format!(
                    "hidden_size {} is not a multiple of num_attention_heads {} (and head_dim \
                     is absent)",
                    c.hidden_size, c.num_attention_heads
                ),
            });
        }
        // Qwen3.5's class defaults where the file is silent (transformers writes them all).
        let (head_dim, n_kv_heads) = if arch == Arch::Qwen35 {
            (
                c.head_dim.unwrap_or(256),
                c.num_key_value_heads.unwrap_or(4),
            )
        } else {
            (c.head_dim(), c.n_kv_heads())
        };
        let (theta, partial) = if arch == Arch::Qwen35 {
            qwen35_rope(c)
        } else {
            (c.rope_theta, c.partial_rotary_factor.unwrap_or(1.0) as f64)
        };
        if !(partial > 0.0 && partial <= 1.0) {
            return Err(RuntimeError::BadConfig {
                path: path.into(),
                reason: format!("partial_rotary_factor {partial} is not in (0, 1]"),
            });
        }
        let rotary_dim = if arch == Arch::Qwen35 {
            // int(head_dim * factor) in double precision, as transformers computes it.
            (head_dim as f64 * partial) as usize
        } else {
            (head_dim as f32 * partial as f32) as usize
        };
        if let Some(s) = &c.rope_scaling {
            if !s.is_null() {
                return Err(RuntimeError::BadConfig {
                    path: path.into(),
                    reason: format!("rope_scaling {s} is not supported yet"),
                });
            }
        }
        let cfg = ModelConfig {
            arch,
            vocab_size: c.vocab_size,
            hidden: c.hidden_size,
            n_layers: c.num_hidden_layers,
            n_heads: c.num_attention_heads,
            n_kv_heads,
            head_dim,
            ffn_dim: c.intermediate_size,
            rms_eps: c.rms_norm_eps,
            rope: RopeConfig {
                theta,
                rotary_dim,
                style: RopeStyle::Neox,
            },
            qkv_bias: c.attention_bias.unwrap_or(arch.has_qkv_bias()),
            o_bias: arch == Arch::Qwen35 && c.attention_bias == Some(true),
            qk_norm: arch.has_qk_norm(),
            tied_embeddings: c.tie_word_embeddings,
            max_context: c.max_position_embeddings.unwrap_or(4096),
            layer_kinds: layer_kinds(c, arch, path)?,
            norm_offset: arch.norm_offset(),
            attn_output_gate: arch == Arch::Qwen35,
            linear: if arch == Arch::Qwen35 {
                Some(linear_attn(c, path)?)
            } else {
                None
            },
        };
        cfg.check(path)?;
        Ok(cfg)
    }

    fn check(&self, path: &str) -> Result<()> {
        if self.layer_kinds.len() != self.n_layers {
            return Err(RuntimeError::BadConfig {
                path: path.to_string(),
                reason: format!(
                    "{} layer types for {} layers",
                    self.layer_kinds.len(),
                    self.n_layers
                ),
            });
        }
        if self.linear.is_none() {
            if let Some(l) = self
                .layer_kinds
                .iter()
                .position(|k| *k != LayerKind::FullAttention)
            {
                return Err(RuntimeError::BadConfig {
                    path: path.to_string(),
                    reason: format!(
                        "layer {l} is {}: Gated DeltaNet layers are supported in Qwen3.5 models only",
                        self.layer_kinds[l].as_str()
                    ),
                });
            }
        }
        if let Some(la) = &self.linear {
            let sizes = [
                ("linear key heads", la.n_k_heads, MAX_HEADS),
                ("linear value heads", la.n_v_heads, MAX_HEADS),
                ("linear key head dim", la.k_head_dim, MAX_HEAD_DIM),
                ("linear value head dim", la.v_head_dim, MAX_HEAD_DIM),
                ("linear convolution kernel", la.conv_kernel, MAX_CONV_KERNEL),
            ];
            check_sizes(path, &sizes)?;
            if let Some((name, _, _)) = sizes.iter().find(|(_, v, _)| *v == 0) {
                return Err(RuntimeError::BadConfig {
                    path: path.to_string(),
                    reason: format!("the model's {name} is 0"),
                });
            }
            if !la.n_v_heads.is_multiple_of(la.n_k_heads) {
                return Err(RuntimeError::BadConfig {
                    path: path.to_string(),
                    reason: format!(
                        "{} linear value heads are not a multiple of {} key heads",
                        la.n_v_heads, la.n_k_heads
                    ),
                });
            }
        }
        let bad = |reason: String| {
            Err(RuntimeError::BadConfig {
                path: path.to_string(),
                reason,
            })
        };
        let sizes = [
            ("layers", self.n_layers, MAX_LAYERS),
            ("hidden size", self.hidden, MAX_WIDTH),
            ("attention heads", self.n_heads, MAX_HEADS),
            ("KV heads", self.n_kv_heads, MAX_HEADS),
            ("head dim", self.head_dim, MAX_HEAD_DIM),
            ("FFN size", self.ffn_dim, MAX_WIDTH * 8),
            ("vocabulary", self.vocab_size, MAX_VOCAB),
        ];
        check_sizes(path, &sizes)?;
        if let Some((name, _, _)) = sizes.iter().find(|(_, v, _)| *v == 0) {
            return bad(format!("the model's {name} is 0"));
        }
        if self.max_context < 2 {
            return bad(format!(
                "a context length of {}: at least 2 tokens are needed (a prompt token and a \
                 reply token)",
                self.max_context
            ));
        }
        if !(self.rope.theta.is_finite() && self.rope.theta > 0.0) {
            return bad(format!(
                "RoPE base {} is not a positive number",
                self.rope.theta
            ));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return bad(format!(
                "RMSNorm epsilon {} is not a number >= 0",
                self.rms_eps
            ));
        }
        if self.kv_layer_count() == 0 {
            return bad("no full-attention layer: inferd runs models with at least one".into());
        }
        if self.n_heads % self.n_kv_heads != 0 {
            return bad(format!(
                "{} heads are not a multiple of {} KV heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        if self.rope.rotary_dim == 0
            || self.rope.rotary_dim > self.head_dim
            || self.rope.rotary_dim % 2 != 0
        {
            return bad(format!(
                "the rotary dim {} (of head dim {}) must be even, above 0 and at most the head \
                 dim",
                self.rope.rotary_dim, self.head_dim
            ));
        }
        Ok(())
    }
}

/// Largest sizes a model may declare: far past any real model, small enough that no
/// product of them overflows or asks for absurd memory before a tensor is checked.
const MAX_LAYERS: usize = 1024;
const MAX_WIDTH: usize = 1 << 17;
const MAX_HEADS: usize = 1024;
const MAX_HEAD_DIM: usize = 1024;
const MAX_VOCAB: usize = 1 << 24;
const MAX_CONV_KERNEL: usize = 64;

/// Each `(name, value, cap)` at most its cap, or an error naming it.
fn check_sizes(path: &str, sizes: &[(&str, usize, usize)]) -> Result<()> {
    match sizes.iter().find(|(_, v, cap)| v > cap) {
        Some((name, v, cap)) => Err(RuntimeError::BadConfig {
            path: path.to_string(),
            reason: format!("{name} {v} is past what inferd accepts ({cap})"),
        }),
        None => Ok(()),
    }
}

/// `layer_types` of an HF config. When absent: every layer full attention, except in
/// Qwen3.5, whose default is one full-attention layer every `full_attention_interval`
/// (default 4) layers, the last of each group, as transformers builds it.
fn layer_kinds(c: &HfConfig, arch: Arch, path: &str) -> Result<Vec<LayerKind>> {
    let bad = |reason: String| RuntimeError::BadConfig {
        path: path.to_string(),
        reason,
    };
    let Some(types) = c.raw.get("layer_types").filter(|v| !v.is_null()) else {
        if arch != Arch::Qwen35 {
            return Ok(vec![LayerKind::FullAttention; c.num_hidden_layers]);
        }
        let interval = match c.raw.get("full_attention_interval") {
            None => 4,
            Some(v) => v.as_u64().filter(|&i| i > 0).ok_or_else(|| {
                bad(format!(
                    "full_attention_interval {v} is not a positive integer"
                ))
            })? as usize,
        };
        return Ok((0..c.num_hidden_layers)
            .map(|i| {
                if (i + 1) % interval == 0 {
                    LayerKind::FullAttention
                } else {
                    LayerKind::LinearAttention
                }
            })
            .collect());
    };
    let list = types
        .as_array()
        .ok_or_else(|| bad("layer_types must be a list".into()))?;
    list.iter()
        .map(|t| {
            let name = t.as_str().unwrap_or("");
            LayerKind::parse(name).ok_or_else(|| bad(format!("layer type {t} is not supported")))
        })
        .collect()
}

/// Rope theta and partial rotary factor as Qwen3.5's config resolves them: the values
/// in `rope_parameters` win; the top-level keys only fill what it lacks (transformers
/// keeps a stale top-level `partial_rotary_factor` beside them); the factor defaults to
/// 0.25, theta to 10000.
fn qwen35_rope(c: &HfConfig) -> (f32, f64) {
    let rp = |k: &str| {
        c.raw
            .get("rope_parameters")
            .and_then(|p| p.get(k))
            .and_then(serde_json::Value::as_f64)
    };
    let top = |k: &str| c.raw.get(k).and_then(serde_json::Value::as_f64);
    let theta = rp("rope_theta")
        .or_else(|| top("rope_theta"))
        .unwrap_or(10000.0);
    let partial = rp("partial_rotary_factor")
        .or_else(|| top("partial_rotary_factor"))
        .unwrap_or(0.25);
    (theta as f32, partial)
}

/// The Gated DeltaNet dimensions of a Qwen3.5 config (transformers' defaults where a
/// field is absent); its activation must be SiLU.
fn linear_attn(c: &HfConfig, path: &str) -> Result<LinearAttnConfig> {
    let bad = |reason: String| RuntimeError::BadConfig {
        path: path.to_string(),
        reason,
    };
    let field = |k: &str, default: usize| -> Result<usize> {
        match c.raw.get(k).filter(|v| !v.is_null()) {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| bad(format!("{k} {v} is not a non-negative integer"))),
        }
    };
    if let Some(act) = c.raw.get("hidden_act").and_then(serde_json::Value::as_str) {
        if act != "silu" {
            return Err(bad(format!(
                "hidden_act '{act}' is not supported (silu only)"
            )));
        }
    }
    Ok(LinearAttnConfig {
        n_k_heads: field("linear_num_key_heads", 16)?,
        n_v_heads: field("linear_num_value_heads", 32)?,
        k_head_dim: field("linear_key_head_dim", 128)?,
        v_head_dim: field("linear_value_head_dim", 128)?,
        conv_kernel: field("linear_conv_kernel_dim", 4)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn hf(extra: &str) -> Result<ModelConfig> {
        let text = format!(
            r#"{{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-6,
            "vocab_size": 100 {extra}}}"#
        );
        let c = HfConfig::from_json_str(&text, Path::new("config.json")).unwrap();
        ModelConfig::from_hf(&c, "config.json")
    }

    #[test]
    fn every_layer_is_full_attention_without_layer_types() {
        let c = hf("").unwrap();
        assert_eq!(c.layer_kinds, vec![LayerKind::FullAttention; 4]);
        assert_eq!(c.kv_layer_count(), 4);
        assert_eq!(
            (0..4).map(|l| c.kv_layer(l)).collect::<Vec<_>>(),
            [Some(0), Some(1), Some(2), Some(3)]
        );
        assert_eq!(c.kv_layer(4), None);
        let c = hf(r#", "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention"]"#)
            .unwrap();
        assert_eq!(c.kv_layer_count(), 4);
    }

    #[test]
    fn pool_layers_skip_layers_without_kv() {
        let mut c = hf("").unwrap();
        c.layer_kinds = vec![
            LayerKind::LinearAttention,
            LayerKind::LinearAttention,
            LayerKind::FullAttention,
            LayerKind::LinearAttention,
        ];
        assert_eq!(c.kv_layer_count(), 1);
        assert_eq!(c.kv_layer(2), Some(0));
        assert_eq!(c.kv_layer(0), None);
        assert_eq!(c.kv_layer(3), None);
    }

    #[test]
    fn unknown_or_unsupported_layer_types_are_clear_errors() {
        let e = hf(r#", "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("layer 0 is linear_attention"), "{e}");
        assert!(e.contains("Qwen3.5 models only"), "{e}");
        let e = hf(r#", "layer_types": ["sliding_attention", "full_attention", "full_attention", "full_attention"]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("sliding_attention"), "{e}");
        let e = hf(r#", "layer_types": ["full_attention"]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 layer types for 4 layers"), "{e}");
    }

    /// The `hf("")` config with `field` set to `value` (JSON).
    fn hf_set(field: &str, value: &str) -> String {
        let base = r#"{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-6,
            "vocab_size": 100}"#;
        let mut v: serde_json::Value = serde_json::from_str(base).unwrap();
        v[field] = serde_json::from_str(value).unwrap();
        let c = HfConfig::from_json_str(&v.to_string(), Path::new("config.json")).unwrap();
        ModelConfig::from_hf(&c, "config.json").map_or_else(|e| e.to_string(), |_| "ok".into())
    }

    #[test]
    fn sizes_past_any_model_are_refused_before_anything_is_sized_by_them() {
        // (field, value, what the error says).
        for (field, value, says) in [
            (
                "num_hidden_layers",
                "1099511627776",
                "num_hidden_layers 1099511627776 is past",
            ),
            (
                "num_hidden_layers",
                "18446744073709551615",
                "is past what inferd accepts",
            ),
            (
                "head_dim",
                "4611686018427387912",
                "head dim 4611686018427387912 is past",
            ),
            (
                "vocab_size",
                "1099511627776",
                "vocab_size 1099511627776 is past",
            ),
            (
                "hidden_size",
                "1099511627776",
                "hidden_size 1099511627776 is past",
            ),
            (
                "max_position_embeddings",
                "1",
                "a context length of 1: at least 2",
            ),
            (
                "max_position_embeddings",
                "0",
                "a context length of 0: at least 2",
            ),
            ("num_attention_heads", "0", "attention heads is 0"),
            (
                "rope_theta",
                "-5.0",
                "RoPE base -5 is not a positive number",
            ),
            ("rms_norm_eps", "-1.0", "RMSNorm epsilon -1"),
            (
                "partial_rotary_factor",
                "-0.5",
                "partial_rotary_factor -0.5",
            ),
            (
                "head_dim",
                "15",
                "must be even, above 0 and at most the head dim",
            ),
        ] {
            let e = hf_set(field, value);
            assert!(e.contains(says), "{field} = {value}: {e}");
        }
        let e = {
            let text = r#"{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64,
                "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 3,
                "num_key_value_heads": 3, "rms_norm_eps": 1e-6, "vocab_size": 100}"#;
            let c = HfConfig::from_json_str(text, Path::new("config.json")).unwrap();
            ModelConfig::from_hf(&c, "config.json")
                .unwrap_err()
                .to_string()
        };
        assert!(
            e.contains("hidden_size 64 is not a multiple of num_attention_heads 3"),
            "{e}"
        );
        assert_eq!(hf_set("rope_theta", "1000000.0"), "ok");
    }

    #[test]
    fn a_hybrid_model_without_a_full_attention_layer_is_refused() {
        let e = qwen35(
            r#", "layer_types": ["linear_attention", "linear_attention", "linear_attention",
            "linear_attention", "linear_attention", "linear_attention", "linear_attention",
            "linear_attention"]"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("no full-attention layer"), "{e}");
        for bad in ["0.0", "-1.0", "1.5"] {
            let e = qwen35(&format!(
                r#", "rope_parameters": {{"rope_type": "default", "partial_rotary_factor": {bad}}}"#
            ))
            .unwrap_err()
            .to_string();
            assert!(e.contains("partial_rotary_factor"), "{bad}: {e}");
        }
        let e = qwen35(r#", "linear_key_head_dim": 9223372036854775824"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("linear key head dim 9223372036854775824 is past"),
            "{e}"
        );
    }

    fn qwen35(extra: &str) -> Result<ModelConfig> {
        let text = format!(
            r#"{{"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
            "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 8,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "rms_norm_eps": 1e-6, "vocab_size": 100, "hidden_act": "silu",
            "linear_num_key_heads": 2, "linear_num_value_heads": 4,
            "linear_key_head_dim": 8, "linear_value_head_dim": 12,
            "linear_conv_kernel_dim": 4 {extra}}}"#
        );
        let c = HfConfig::from_json_str(&text, Path::new("config.json")).unwrap();
        ModelConfig::from_hf(&c, "config.json")
    }

    #[test]
    fn qwen35_default_layer_pattern_and_dimensions() {
        let c = qwen35("").unwrap();
        assert_eq!(c.arch, Arch::Qwen35);
        let full: Vec<usize> = (0..8)
            .filter(|&l| c.layer_kinds[l] == LayerKind::FullAttention)
            .collect();
        assert_eq!(full, [3, 7]);
        assert_eq!(c.state_layer_count(), 6);
        assert_eq!(c.state_layer(4), Some(3));
        assert_eq!(c.state_layer(3), None);
        assert_eq!(c.kv_layer(7), Some(1));
        let la = c.linear.unwrap();
        assert_eq!((la.key_dim(), la.value_dim(), la.conv_dim()), (16, 48, 80));
        assert_eq!(la.conv_state_elems(), 3 * 80);
        assert_eq!(la.delta_state_elems(), 4 * 8 * 12);
        assert!(c.attn_output_gate && c.qk_norm);
        assert_eq!(c.q_proj_dim(), 2 * 64);
        assert_eq!(c.norm_offset, 1.0);
        // partial rotary defaults to 0.25 of the head
        assert_eq!(c.rope.rotary_dim, 4);
        let c = qwen35(r#", "full_attention_interval": 2"#).unwrap();
        assert_eq!(c.kv_layer_count(), 4);
        assert_eq!(c.layer_kinds[1], LayerKind::FullAttention);
    }

    #[test]
    fn qwen35_rope_parameters_win_over_stale_top_level_keys() {
        let c = qwen35(
            r#", "partial_rotary_factor": 0.25, "rope_theta": 5.0,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5}"#,
        )
        .unwrap();
        assert_eq!((c.rope.rotary_dim, c.rope.theta), (8, 1e6));
        let c = qwen35(
            r#", "partial_rotary_factor": 0.75, "rope_parameters": {"rope_type": "default"}"#,
        )
        .unwrap();
        assert_eq!((c.rope.rotary_dim, c.rope.theta), (12, 10000.0));
    }

    #[test]
    fn qwen35_bad_linear_settings_are_clear_errors() {
        let e = qwen35(r#", "linear_num_key_heads": 3"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a multiple of 3 key heads"), "{e}");
        let e = qwen35(r#", "linear_conv_kernel_dim": 0"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("linear convolution kernel is 0"), "{e}");
        let e = qwen35(r#", "hidden_act": "gelu""#).unwrap_err().to_string();
        assert!(e.contains("silu only"), "{e}");
    }
}
