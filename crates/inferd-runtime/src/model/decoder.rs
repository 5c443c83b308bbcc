//! The pre-norm decoder-only transformer shared by Llama, Qwen2 and Qwen3.
//!
//! For each layer ℓ, with x the residual stream of all tokens in the batch:
//!   1. h = RMSNorm(x)
//!   2. x = x + Mixer_ℓ(h), by the layer's kind (`ModelConfig::layer_kinds`):
//!      full attention (below); linear attention (hybrid models) slots in here
//!   3. h = RMSNorm(x)
//!   4. x = x + (SiLU(h·W_gateᵀ) ⊙ h·W_upᵀ)·W_downᵀ                    (SwiGLU)
//! then logits = RMSNorm(x)·W_lmᵀ for the requested rows (W_lm = W_embed when tied).
//!
//! Full attention, over the KV pool layer `ModelConfig::kv_layer(ℓ)`:
//!   a. q, k, v = h·W_qᵀ (+b_q), h·W_kᵀ (+b_k), h·W_vᵀ (+b_v)        (Qwen2: biases)
//!   b. q, k = RMSNorm_head(q), RMSNorm_head(k)                       (Qwen3 only)
//!   c. q, k = RoPE(q, pos), RoPE(k, pos)
//!   d. a = softmax(q·kᵀ/√d + causal mask)·v over the paged KV of each sequence (GQA)
//!   e. out = a·W_oᵀ

use super::config::ModelConfig;
use super::weights::{AttentionWeights, LayerWeights, Mixer, Projection, Weights};
use crate::backend::{AttnConfig, Backend, Rows};

pub struct Decoder<'a, B: Backend> {
    pub backend: &'a B,
    pub cfg: &'a ModelConfig,
    pub weights: &'a Weights<B::Weight>,
}

impl<B: Backend> Decoder<'_, B> {
    /// Runs all layers. Returns logits of the batch's requested rows.  -> [n_logits, vocab]
    pub fn forward(&self, kv: &mut B::Kv, batch: &B::Batch) -> B::Tensor {
        let (b, w) = (self.backend, self.weights);
        let mut x = b.embed(&w.embed, batch); // [n_tokens, hidden]
        for (layer, lw) in w.layers.iter().enumerate() {
            self.layer(&mut x, lw, layer, kv, batch);
        }
        let x = b.gather_logit_rows(&x, batch); // [n_logits, hidden]
        let h = b.rms_norm(&x, &w.final_norm, self.cfg.rms_eps);
        b.linear(
            &h,
            w.lm_head.as_ref().unwrap_or(&w.embed),
            None,
            batch,
            Rows::Logits,
        ) // [n_logits, vocab]
    }

    fn layer(
        &self,
        x: &mut B::Tensor,
        lw: &LayerWeights<B::Weight>,
        layer: usize,
        kv: &mut B::Kv,
        batch: &B::Batch,
    ) {
        let (b, c) = (self.backend, self.cfg);
        // 1-2. token mixer and residual
        let h = b.rms_norm(x, &lw.attn_norm, c.rms_eps);
        let mixed = match &lw.mixer {
            Mixer::FullAttention(aw) => {
                let kv_layer = c
                    .kv_layer(layer)
                    .expect("an attention layer has a KV layer");
                self.attention(&h, aw, kv_layer, kv, batch)
            }
        };
        b.add_assign(x, &mixed);
        // 3-4. SwiGLU feed-forward and residual
        let h = b.rms_norm(x, &lw.ffn_norm, c.rms_eps);
        let mut gu = self.project(&h, &lw.gate_up, batch).into_iter();
        let (gate, up) = (gu.next().unwrap(), gu.next().unwrap()); // [n, ffn] each
        let f = b.silu_mul(&gate, &up);
        b.add_assign(x, &b.linear(&f, &lw.down, None, batch, Rows::Tokens));
    }

    /// Full attention of `h` ([n, hidden]) through pool layer `kv_layer`.  -> [n, hidden]
    fn attention(
        &self,
        h: &B::Tensor,
        aw: &AttentionWeights<B::Weight>,
        kv_layer: usize,
        kv: &mut B::Kv,
        batch: &B::Batch,
    ) -> B::Tensor {
        let (b, c) = (self.backend, self.cfg);
        // a. projections
        let mut qkv = self.project(h, &aw.qkv, batch).into_iter();
        let (mut q, mut k, v) = (
            qkv.next().unwrap(),
            qkv.next().unwrap(),
            qkv.next().unwrap(),
        );
        // b. QK-norm
        if let (Some(qn), Some(kn)) = (&aw.q_norm, &aw.k_norm) {
            b.head_rms_norm(&mut q, qn, c.head_dim, c.rms_eps);
            b.head_rms_norm(&mut k, kn, c.head_dim, c.rms_eps);
        }
        // c. rotary positions
        b.rope(&mut q, c.head_dim, batch);
        b.rope(&mut k, c.head_dim, batch);
        // d. attention through the paged cache
        let attn = AttnConfig {
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
        };
        let a = b.attention(&q, &k, &v, kv, kv_layer, batch, &attn); // [n, q_dim]
                                                                     // e. output projection
        b.linear(&a, &aw.o, None, batch, Rows::Tokens)
    }

    /// Evaluates a (possibly fused) projection; outputs in declaration order.
    fn project(
        &self,
        h: &B::Tensor,
        p: &Projection<B::Weight>,
        batch: &B::Batch,
    ) -> Vec<B::Tensor> {
        let mut outs = Vec::new();
        for (w, bias, widths) in &p.groups {
            let y = self
                .backend
                .linear(h, w, bias.as_ref(), batch, Rows::Tokens);
            if widths.len() == 1 {
                outs.push(y);
            } else {
                outs.extend(self.backend.split_cols(&y, widths));
            }
        }
        outs
    }
}
