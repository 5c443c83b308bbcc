//! The activations of a forward pass, allocated once: every buffer the decoder writes
//! has its place here, sized for the largest pass seen (tokens and logits rows) and
//! reshaped per pass within that, so a step allocates nothing on the device. The
//! caller that runs steps (the engine's runner) owns one; [`super::Model::forward`]
//! makes a throwaway one for one-off passes.

use super::config::ModelConfig;
use crate::backend::Backend;
use crate::Result;

/// Distinct for every workspace ever allocated (see [`Workspace::generation`]).
static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub struct Workspace<B: Backend> {
    /// Unique to this set of buffers (a grown workspace gets a new one).
    generation: u64,
    /// Token rows and logits rows the buffers hold now.
    tokens: usize,
    logit_rows: usize,
    /// The residual stream.  // [n_tokens, hidden]
    pub(crate) x: B::Tensor,
    /// A normed copy of it (the input of a mixer or feed-forward).  // [n_tokens, hidden]
    pub(crate) h: B::Tensor,
    /// The output of a fused projection before its split.  // [n_tokens, widest fused]
    pub(crate) proj: B::Tensor,
    pub(crate) q: B::Tensor,    // [n_tokens, q_dim]
    pub(crate) k: B::Tensor,    // [n_tokens, kv_dim]
    pub(crate) v: B::Tensor,    // [n_tokens, kv_dim]
    pub(crate) attn: B::Tensor, // [n_tokens, q_dim]
    /// A layer's mixer or feed-forward output, added to the stream.  // [n_tokens, hidden]
    pub(crate) out: B::Tensor,
    pub(crate) gate: B::Tensor, // [n_tokens, ffn]
    pub(crate) up: B::Tensor,   // [n_tokens, ffn]
    pub(crate) act: B::Tensor,  // [n_tokens, ffn]
    /// Gated attention (Qwen3.5): the Q projection with each head's gate after its query,
    /// and the gates split off.  // [n_tokens, 2 * q_dim], [n_tokens, q_dim] (empty otherwise)
    pub(crate) q_gate: B::Tensor,
    pub(crate) attn_gate: B::Tensor,
    /// Gated DeltaNet layers (hybrid models; empty otherwise), see `model::delta_net`.
    pub(crate) lin: DeltaNetBuffers<B>,
    /// The stream's rows that produce logits, and their final norm.  // [n_logits, hidden]
    pub(crate) last: B::Tensor,
    pub(crate) last_h: B::Tensor,
    /// The pass's result.  // [n_logits, vocab]
    pub(crate) logits: B::Tensor,
}

/// A Gated DeltaNet layer's activations.
pub(crate) struct DeltaNetBuffers<B: Backend> {
    pub(crate) qkv: B::Tensor, // [n_tokens, conv_dim]   Q|K|V before the convolution
    pub(crate) z: B::Tensor,   // [n_tokens, value_dim]  the output gate
    pub(crate) b: B::Tensor,   // [n_tokens, n_v_heads]  beta before its sigmoid
    pub(crate) a: B::Tensor,   // [n_tokens, n_v_heads]  the decay's input
    pub(crate) conv: B::Tensor, // [n_tokens, conv_dim]   Q|K|V after conv + SiLU
    pub(crate) q: B::Tensor,   // [n_tokens, key_dim]
    pub(crate) k: B::Tensor,   // [n_tokens, key_dim]
    pub(crate) v: B::Tensor,   // [n_tokens, value_dim]
    pub(crate) g: B::Tensor,   // [n_tokens, n_v_heads]  log decay
    pub(crate) beta: B::Tensor, // [n_tokens, n_v_heads]
    pub(crate) core: B::Tensor, // [n_tokens, value_dim]  the delta rule's output
    pub(crate) gated: B::Tensor, // [n_tokens, value_dim]  after the gated RMSNorm
}

/// Elements of each buffer for `t` token rows and `l` logits rows.
struct Sizes {
    hidden: usize,
    proj: usize,
    q: usize,
    kv: usize,
    ffn: usize,
    q_gate: usize,
    attn_gate: usize,
    conv: usize,
    key: usize,
    value: usize,
    heads: usize,
    last: usize,
    logits: usize,
}

fn sizes(cfg: &ModelConfig, t: usize, l: usize) -> Sizes {
    let (conv, key, value, heads) = match &cfg.linear {
        Some(la) if cfg.state_layer_count() > 0 => {
            (la.conv_dim(), la.key_dim(), la.value_dim(), la.n_v_heads)
        }
        _ => (0, 0, 0, 0),
    };
    let widest = (cfg.q_proj_dim() + 2 * cfg.kv_dim())
        .max(2 * cfg.ffn_dim)
        .max(conv + value + 2 * heads);
    let gated = cfg.attn_output_gate as usize;
    Sizes {
        hidden: t * cfg.hidden,
        proj: t * widest,
        q: t * cfg.q_dim(),
        kv: t * cfg.kv_dim(),
        ffn: t * cfg.ffn_dim,
        q_gate: gated * t * cfg.q_proj_dim(),
        attn_gate: gated * t * cfg.q_dim(),
        conv: t * conv,
        key: t * key,
        value: t * value,
        heads: t * heads,
        last: l * cfg.hidden,
        logits: l * cfg.vocab_size,
    }
}

impl<B: Backend> Workspace<B> {
    /// Buffers for passes of up to `tokens` tokens and `logit_rows` logits rows.
    pub fn new(backend: &B, cfg: &ModelConfig, tokens: usize, logit_rows: usize) -> Result<Self> {
        let s = sizes(cfg, tokens, logit_rows);
        let a = |n: usize| backend.alloc(n);
        Ok(Workspace {
            generation: GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            tokens,
            logit_rows,
            x: a(s.hidden)?,
            h: a(s.hidden)?,
            proj: a(s.proj)?,
            q: a(s.q)?,
            k: a(s.kv)?,
            v: a(s.kv)?,
            attn: a(s.q)?,
            out: a(s.hidden)?,
            gate: a(s.ffn)?,
            up: a(s.ffn)?,
            act: a(s.ffn)?,
            q_gate: a(s.q_gate)?,
            attn_gate: a(s.attn_gate)?,
            lin: DeltaNetBuffers {
                qkv: a(s.conv)?,
                z: a(s.value)?,
                b: a(s.heads)?,
                a: a(s.heads)?,
                conv: a(s.conv)?,
                q: a(s.key)?,
                k: a(s.key)?,
                v: a(s.value)?,
                g: a(s.heads)?,
                beta: a(s.heads)?,
                core: a(s.value)?,
                gated: a(s.value)?,
            },
            last: a(s.last)?,
            last_h: a(s.last)?,
            logits: a(s.logits)?,
        })
    }

    /// Makes room for a pass of `tokens` and `logit_rows` (reallocating, outside the
    /// steady state, only when the pass is larger than any before).
    pub fn ensure(
        &mut self,
        backend: &B,
        cfg: &ModelConfig,
        tokens: usize,
        logit_rows: usize,
    ) -> Result<()> {
        if tokens <= self.tokens && logit_rows <= self.logit_rows {
            return Ok(());
        }
        *self = Workspace::new(
            backend,
            cfg,
            tokens.max(self.tokens),
            logit_rows.max(self.logit_rows),
        )?;
        Ok(())
    }

    /// Identifies these buffers: a captured pass (a CUDA graph) is valid only for the
    /// workspace it wrote.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The last pass's logits (`[n_logits, vocab]`, on the device).
    pub fn logits(&self) -> &B::Tensor {
        &self.logits
    }

    /// The logits, to reshape after a pass (see `Model::forward_in`).
    pub(crate) fn logits_mut(&mut self) -> &mut B::Tensor {
        &mut self.logits
    }
}
