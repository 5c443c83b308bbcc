//! The Gated DeltaNet token mixer of hybrid models (Yang, Kautz & Hatamizadeh, "Gated
//! Delta Networks: Improving Mamba2 with Delta Rule", 2024), as Qwen3.5 builds it
//! (transformers' `Qwen3_5GatedDeltaNet`). For the layer input h of every token:
//!
//!   a. qkv, z, b, a = h·W_qkvᵀ, h·W_zᵀ, h·W_bᵀ, h·W_aᵀ                 (one fused matmul)
//!   b. qkv = SiLU(causal depthwise conv1d(qkv))   over the sequence, its last inputs
//!      carried in the sequence's state slot
//!   c. q, k, v = split(qkv)                       n_k_heads, n_k_heads, n_v_heads heads
//!   d. q = L2Norm(q) / √d_k, k = L2Norm(k)        per head
//!   e. g = -exp(A_log) · softplus(a + dt_bias),  beta = sigmoid(b)     per value head
//!   f. o = the gated delta rule over (q, k, v, g, beta), from and into the slot's state
//!      S [d_k, d_v] per value head (each key head serves n_v / n_k value heads)
//!   g. o = RMSNorm(o) · w ⊙ SiLU(z)               per value head (the gated norm)
//!   h. out = o·W_outᵀ
//!
//! Every step is a backend op writing a workspace buffer.

use super::decoder::Decoder;
use super::weights::DeltaNetWeights;
use super::workspace::{DeltaNetBuffers, Workspace};
use crate::backend::{Backend, DeviceTensor, Keep, Rows};
use crate::{Result, RuntimeError};

/// transformers' (and fla's) `l2norm` epsilon, fixed whatever the config says.
const L2_EPS: f32 = 1e-6;

impl<B: Backend> Decoder<'_, B> {
    /// The DeltaNet of `ws.h` through state layer `state_layer`.  -> ws.out [n, hidden]
    pub(super) fn delta_net(
        &self,
        ws: &mut Workspace<B>,
        dw: &DeltaNetWeights<B::Weight>,
        state_layer: usize,
        kv: &mut B::Kv,
        batch: &B::Batch,
    ) -> Result<()> {
        let (be, c) = (self.backend, self.cfg);
        let la = c
            .linear
            .as_ref()
            .ok_or_else(|| RuntimeError::Other("a DeltaNet layer without its config".into()))?;
        let Workspace {
            h, proj, lin, out, ..
        } = ws;
        let DeltaNetBuffers {
            qkv,
            z,
            b,
            a,
            conv,
            q,
            k,
            v,
            g,
            beta,
            core,
            gated,
        } = lin;
        // a. projections: qkv [n, conv_dim], z [n, value_dim], b, a [n, n_v_heads]
        self.project(h, &dw.in_proj, batch, proj, &mut [qkv, z, b, a])?;
        // b. causal conv over the sequence (state slot), SiLU  -> conv [n, conv_dim]
        be.causal_conv1d_silu(qkv, &dw.conv, kv, state_layer, batch, la, conv)?;
        // c. q, k [n, key_dim], v [n, value_dim]
        let n = conv.rows();
        q.set_shape(n, la.key_dim())?;
        k.set_shape(n, la.key_dim())?;
        v.set_shape(n, la.value_dim())?;
        be.split_cols(conv, &mut [q, k, v])?;
        // d. unit q and k per head; q also scaled by 1/√d_k
        let scale = 1.0 / (la.k_head_dim as f32).sqrt();
        be.l2_norm_heads(q, la.k_head_dim, L2_EPS, scale)?;
        be.l2_norm_heads(k, la.k_head_dim, L2_EPS, 1.0)?;
        // e. decay (log space) and beta  -> g, beta [n, n_v_heads]
        be.delta_gates(a, b, &dw.a_log, &dw.dt_bias, g, beta)?;
        // f. the delta rule  -> core [n, value_dim]
        be.gated_delta_rule(q, k, v, g, beta, kv, state_layer, batch, la, core)?;
        // g. gated RMSNorm per value head  -> gated [n, value_dim]
        be.gated_rms_norm(core, z, &dw.norm, la.v_head_dim, c.rms_eps, gated)?;
        // h. output projection  -> out [n, hidden]
        be.linear(gated, &dw.out, None, batch, Rows::Tokens, Keep::F32, out)
    }
}
