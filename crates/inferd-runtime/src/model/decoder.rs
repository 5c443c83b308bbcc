//! The pre-norm decoder-only transformer shared by Llama, Qwen2, Qwen3 and Qwen3.5.
//!
//! For each layer ℓ, with x the residual stream of all tokens in the batch:
//!   1. h = RMSNorm(x)              (fused with the previous layer's 4th add; Qwen3.5:
//!      every RMSNorm scales by 1 + w)
//!   2. x = x + Mixer_ℓ(h), by the layer's kind (`ModelConfig::layer_kinds`):
//!      full attention (below) or a Gated DeltaNet (`model::delta_net`, hybrid models)
//!   3. h = RMSNorm(x)                                                 (fused with 2's add)
//!   4. x = x + (SiLU(h·W_gateᵀ) ⊙ h·W_upᵀ)·W_downᵀ                    (SwiGLU)
//!
//! Then logits = RMSNorm(x)·W_lmᵀ for the requested rows (W_lm = W_embed when tied).
//!
//! Fused projections (Q|K|V, gate|up) hand their whole output to one backend op
//! (`qkv_prep`; gate|up's product and its SwiGLU are one op, `linear_swiglu`), which a
//! backend may run as one kernel; what reads them rounds to
//! bf16, so a backend may store them in bf16 (`Keep::Bf16`). `qkv_prep` may also store the
//! new K/V rows in the pool (`KvRows::Stored`), which `attention` then does not. The
//! products that end 2. and 4. join the residual stream together with the next norm (`join`,
//! `Backend::linear_add_rms_norm`), which a backend may add where the product is made.
//!
//! Full attention, over the KV pool layer `ModelConfig::kv_layer(ℓ)`:
//!   a. q, k, v = h·W_qᵀ (+b_q), h·W_kᵀ (+b_k), h·W_vᵀ (+b_v)        (Qwen2: biases)
//!      (Qwen3.5: W_q also yields a gate per head, right after the head's query)
//!   b. q, k = RMSNorm_head(q), RMSNorm_head(k)                       (Qwen3, Qwen3.5)
//!   c. q, k = RoPE(q, pos), RoPE(k, pos)            (first rotary_dim of each head)
//!   d. a = softmax(q·kᵀ/√d + causal mask)·v over the paged KV of each sequence (GQA)
//!   e. a = a ⊙ sigmoid(gate)                                         (Qwen3.5 only)
//!   f. out = a·W_oᵀ (+b_o)                              (Qwen3.5 with attention_bias)
//!
//! On a rank of a tensor-parallel group (`Backend::shard`, `model::shard`) the layer's
//! weights are the rank's slices, and the mixer's and the feed-forward's outputs are
//! summed over the group (`Backend::all_reduce`) before they join the residual stream.
//!
//! Every activation lives in a [`Workspace`] buffer; the ops write into them.

use super::config::ModelConfig;
use super::weights::{AttentionWeights, LayerWeights, Mixer, Projection, Weights};
use super::workspace::Workspace;
use crate::backend::{Backend, DeviceTensor, Keep, KvRows, NewKv, Rows};
use crate::Result;

/// Whose activation a product joining the residual stream reads.
#[derive(Clone, Copy)]
enum Joined {
    /// `ws.attn`: the attention's output projection.
    Attention,
    /// `ws.act`: the feed-forward's down projection.
    FeedForward,
}

pub struct Decoder<'a, B: Backend> {
    pub backend: &'a B,
    pub cfg: &'a ModelConfig,
    pub weights: &'a Weights<B::Weight>,
}

impl<B: Backend> Decoder<'_, B> {
    /// Runs all layers; the logits of the batch's requested rows end in `ws.logits`.
    pub fn forward(&self, ws: &mut Workspace<B>, kv: &mut B::Kv, batch: &B::Batch) -> Result<()> {
        let (b, w) = (self.backend, self.weights);
        b.embed(&w.embed, batch, &mut ws.x)?; // [n_tokens, hidden]
        if let Some(first) = w.layers.first() {
            // 1. the first mixer's input (a later layer's comes with the residual before it)
            b.rms_norm(&ws.x, &first.attn_norm, self.cfg.rms_eps, &mut ws.h)?;
        }
        for (layer, lw) in w.layers.iter().enumerate() {
            let next_norm = w.layers.get(layer + 1).map(|n| &n.attn_norm);
            self.layer(ws, lw, layer, next_norm, kv, batch)?;
        }
        b.gather_logit_rows(&ws.x, batch, &mut ws.last)?; // [n_logits, hidden]
        b.rms_norm(&ws.last, &w.final_norm, self.cfg.rms_eps, &mut ws.last_h)?;
        let lm_head = w.lm_head.as_ref().unwrap_or(&w.embed);
        b.linear(
            &ws.last_h,
            lm_head,
            None,
            batch,
            Rows::Logits,
            Keep::F32,
            &mut ws.logits,
        ) // [n_logits, vocab]
    }

    /// One layer over `ws.h` (its input norm, step 1, is done); it leaves the residual
    /// stream in `ws.x` and, before the next layer, that layer's norm of it (`next_norm`)
    /// in `ws.h`.
    fn layer(
        &self,
        ws: &mut Workspace<B>,
        lw: &LayerWeights<B::Weight>,
        layer: usize,
        next_norm: Option<&B::Weight>,
        kv: &mut B::Kv,
        batch: &B::Batch,
    ) -> Result<()> {
        let (b, c) = (self.backend, self.cfg);
        // 2. token mixer of ws.h, 3. its residual and the feed-forward's input norm
        match &lw.mixer {
            Mixer::FullAttention(aw) => {
                let kv_layer = c
                    .kv_layer(layer)
                    .expect("an attention layer has a KV layer");
                // a.-e. -> ws.attn; f. the output projection joins the residual stream
                self.attention(ws, aw, kv_layer, kv, batch)?;
                let o = (&aw.o, aw.o_bias.as_ref());
                self.join(ws, Joined::Attention, o, Some(&lw.ffn_norm), batch)?;
            }
            Mixer::LinearAttention(dw) => {
                let state_layer = c
                    .state_layer(layer)
                    .expect("a linear-attention layer has a state layer");
                self.delta_net(ws, dw, state_layer, kv, batch)?; // -> ws.out
                b.add_rms_norm(&mut ws.x, &ws.out, &lw.ffn_norm, c.rms_eps, &mut ws.h)?;
            }
        }
        // 4. SwiGLU feed-forward of ws.h -> ws.act
        let Workspace {
            h,
            proj,
            gate,
            up,
            act,
            ..
        } = ws;
        if let Some((w, bias)) = lw.gate_up.fused(2) {
            b.linear_swiglu(h, w, bias, batch, proj, gate, up, act)?; // [n, ffn]
        } else {
            self.project(h, &lw.gate_up, batch, proj, &mut [gate, up])?; // [n, ffn] each
            b.silu_mul(gate, up, act)?;
        }
        // ... whose down projection joins the residual stream (and 1. of the next layer)
        self.join(ws, Joined::FeedForward, (&lw.down, None), next_norm, batch)
    }

    /// `x += a · wᵀ (+ bias)` for `a` the attention's or the feed-forward's activation
    /// (summed over a tensor-parallel group first), then `h = rms_norm(x) · norm` where a
    /// norm follows (none after the last layer). `ws.out` holds the product where it is
    /// made apart.
    fn join(
        &self,
        ws: &mut Workspace<B>,
        from: Joined,
        (w, bias): (&B::Weight, Option<&B::Weight>),
        norm: Option<&B::Weight>,
        batch: &B::Batch,
    ) -> Result<()> {
        let (b, eps) = (self.backend, self.cfg.rms_eps);
        let Workspace {
            x,
            out,
            h,
            attn,
            act,
            ..
        } = ws;
        let a = match from {
            Joined::Attention => &*attn,
            Joined::FeedForward => &*act,
        };
        match norm {
            Some(norm) if b.shard().is_whole() => {
                b.linear_add_rms_norm(a, w, bias, batch, x, (norm, eps), out, h)
            }
            _ => {
                b.linear(a, w, bias, batch, Rows::Tokens, Keep::F32, out)?;
                self.reduce(out)?; // a split model: the partial sums of its slices
                match norm {
                    Some(norm) => b.add_rms_norm(x, out, norm, eps, h),
                    None => b.add_assign(x, out),
                }
            }
        }
    }

    /// The sum of `x` over the backend's tensor-parallel group; nothing on a backend alone.
    fn reduce(&self, x: &mut B::Tensor) -> Result<()> {
        if self.backend.shard().is_whole() {
            return Ok(());
        }
        self.backend.all_reduce(x)
    }

    /// Full attention of `ws.h` through pool layer `kv_layer`, steps a–e.  -> ws.attn [n, q_dim]
    fn attention(
        &self,
        ws: &mut Workspace<B>,
        aw: &AttentionWeights<B::Weight>,
        kv_layer: usize,
        kv: &mut B::Kv,
        batch: &B::Batch,
    ) -> Result<()> {
        let (b, c) = (self.backend, self.cfg);
        let attn = c.attn_config();
        let norms = aw.q_norm.as_ref().zip(aw.k_norm.as_ref());
        let Workspace {
            h,
            proj,
            q,
            k,
            v,
            q_gate,
            attn_gate,
            ..
        } = ws;
        let fused = aw.qkv.fused(3).filter(|_| !c.attn_output_gate);
        let mut rows = KvRows::InTensors;
        if let Some((w, bias)) = fused {
            // a. the fused projection, then b. QK-norm and c. rotary positions (and, at the
            // backend's choice, k and v stored in the pool)
            b.linear(h, w, bias, batch, Rows::Tokens, Keep::Bf16, proj)?; // [n, q_dim + 2·kv_dim]
            let store = Some((&mut *kv, kv_layer));
            rows = b.qkv_prep(proj, &attn, norms, c.rms_eps, batch, store, q, k, v)?;
        } else {
            // a. projections (with the output gate: q|gate per head, then split)
            if c.attn_output_gate {
                self.project(h, &aw.qkv, batch, proj, &mut [q_gate, k, v])?;
                b.split_head_pairs(q_gate, c.head_dim, q, attn_gate)?; // [n, q_dim] each
            } else {
                self.project(h, &aw.qkv, batch, proj, &mut [q, k, v])?;
            }
            // b. QK-norm
            if let Some((qn, kn)) = norms {
                b.head_rms_norm(q, qn, c.head_dim, c.rms_eps)?;
                b.head_rms_norm(k, kn, c.head_dim, c.rms_eps)?;
            }
            // c. rotary positions
            b.rope(q, c.head_dim, batch)?;
            b.rope(k, c.head_dim, batch)?;
        }
        // d. attention through the paged cache
        let new = match rows {
            KvRows::InTensors => NewKv::Rows(&ws.k, &ws.v),
            KvRows::Stored => NewKv::Stored,
        };
        b.attention(&ws.q, new, kv, kv_layer, batch, &attn, &mut ws.attn)?; // [n, q_dim]
        if c.attn_output_gate {
            // e. the output gate
            b.sigmoid_mul(&mut ws.attn, &ws.attn_gate)?;
        }
        Ok(()) // f., the output projection, joins the residual stream in `join`
    }

    /// Evaluates a (possibly fused) projection of `h` into `outs` (declaration order):
    /// a group of one output writes it directly, a fused group goes through `scratch`
    /// and is split.
    pub(super) fn project(
        &self,
        h: &B::Tensor,
        p: &Projection<B::Weight>,
        batch: &B::Batch,
        scratch: &mut B::Tensor,
        outs: &mut [&mut B::Tensor],
    ) -> Result<()> {
        let b = self.backend;
        let mut next = 0;
        for (w, bias, widths) in &p.groups {
            let n = widths.len();
            if n == 1 {
                b.linear(
                    h,
                    w,
                    bias.as_ref(),
                    batch,
                    Rows::Tokens,
                    Keep::F32,
                    outs[next],
                )?;
            } else {
                b.linear(h, w, bias.as_ref(), batch, Rows::Tokens, Keep::F32, scratch)?;
                let group = &mut outs[next..next + n];
                for (o, &width) in group.iter_mut().zip(widths) {
                    o.set_shape(h.rows(), width)?;
                }
                b.split_cols(scratch, group)?;
            }
            next += n;
        }
        Ok(())
    }
}
