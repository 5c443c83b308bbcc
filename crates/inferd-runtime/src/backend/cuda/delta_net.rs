//! The hybrid-model ops of the CUDA backend (Gated DeltaNet layers and Qwen3.5's gated
//! attention), each a check of its shapes and one call into `kernels/delta_net.cu` or
//! `kernels/delta_rule.cu`. Inputs are f32 activations (projection outputs); the gated
//! RMSNorm writes bf16 (the output projection's input); the state is read from and left in
//! the chunks' slots of the pool ([`super::state`]). Every kernel's grid follows the pass's
//! shape only, so decode passes replay from CUDA graphs.

use std::ffi::c_int;
use std::sync::Arc;

use super::batch::CudaBatch;
use super::device::{Device, DeviceBuffer};
use super::ffi::{self, check, Stream};
use super::kv::CudaKv;
use super::tensor::{Act, CudaTensor, CudaWeight};
use crate::model::LinearAttnConfig;
use crate::{Result, RuntimeError};

fn int(v: usize) -> c_int {
    v as c_int
}

fn bad(msg: String) -> RuntimeError {
    RuntimeError::BadBatch(msg)
}

/// x [n, heads * 2d] -> a, b [n, heads * d]
pub fn split_head_pairs(
    s: Stream,
    x: &CudaTensor,
    d: usize,
    a: &mut CudaTensor,
    b: &mut CudaTensor,
) -> Result<()> {
    if d == 0 || !x.cols.is_multiple_of(2 * d) {
        return Err(bad(format!(
            "split_head_pairs: {} columns are not pairs of {d}-wide heads",
            x.cols
        )));
    }
    let xp = x.f32_ptr("split_head_pairs")?;
    a.prepare(x.rows, x.cols / 2, Act::F32)?;
    b.prepare(x.rows, x.cols / 2, Act::F32)?;
    let heads = x.cols / (2 * d);
    check(
        unsafe {
            ffi::ifd_split_head_pairs(
                xp,
                int(x.rows),
                int(heads),
                int(d),
                a.f32_ptr("split_head_pairs")?,
                b.f32_ptr("split_head_pairs")?,
                s,
            )
        },
        "split_head_pairs",
    )
}

/// x *= sigmoid(gate), x in whatever it holds (attention's output: bf16).  [n, d], [n, d]
pub fn sigmoid_mul(s: Stream, x: &mut CudaTensor, gate: &CudaTensor) -> Result<()> {
    if x.rows != gate.rows || x.cols != gate.cols {
        return Err(bad(format!(
            "sigmoid_mul: shapes [{}, {}] and [{}, {}] differ",
            x.rows, x.cols, gate.rows, gate.cols
        )));
    }
    let gp = gate.f32_ptr("sigmoid_mul")?;
    let (xp, bf16) = match x.dtype() {
        Act::F32 => (x.f32_ptr("sigmoid_mul")?.cast(), 0),
        Act::Bf16 => (x.bf16_ptr("sigmoid_mul")?, 1),
    };
    check(
        unsafe { ffi::ifd_sigmoid_mul(xp, bf16, gp, x.len(), s) },
        "sigmoid_mul",
    )
}

/// x [n, conv_dim], w [conv_dim * taps] -> out [n, conv_dim], through the chunks' conv
/// states of state layer `layer`.
#[allow(clippy::too_many_arguments)]
pub fn causal_conv1d_silu(
    s: Stream,
    x: &CudaTensor,
    w: &CudaWeight,
    kv: &mut CudaKv,
    layer: usize,
    batch: &CudaBatch,
    cfg: &LinearAttnConfig,
    out: &mut CudaTensor,
) -> Result<()> {
    let (wp, wlen) = w.vector("causal_conv1d")?;
    let (dim, taps) = (cfg.conv_dim(), cfg.conv_kernel);
    if x.cols != dim || wlen != dim * taps || x.rows != batch.n_tokens {
        return Err(bad(format!(
            "causal_conv1d: input [{}, {}] or a kernel of {wlen} values for {dim} channels of \
             {taps} taps over {} rows",
            x.rows, x.cols, batch.n_tokens
        )));
    }
    if kv.state.layout.conv_elems != cfg.conv_state_elems() {
        return Err(bad(
            "causal_conv1d: the pool's conv state has another size".into()
        ));
    }
    let state = kv.state.conv(layer)?;
    let xp = x.f32_ptr("causal_conv1d")?;
    out.prepare(x.rows, dim, Act::F32)?;
    check(
        unsafe {
            ffi::ifd_causal_conv1d_silu(
                xp,
                wp,
                state,
                batch.chunks(),
                int(batch.n_chunks),
                batch.seq(),
                int(x.rows),
                int(dim),
                int(taps),
                out.f32_ptr("causal_conv1d")?,
                s,
            )
        },
        "causal_conv1d",
    )
}

/// In place: every d-slice scaled to `scale / sqrt(Σx² + eps)` of itself.
pub fn l2_norm_heads(s: Stream, x: &mut CudaTensor, d: usize, eps: f32, scale: f32) -> Result<()> {
    if d == 0 || !x.cols.is_multiple_of(d) {
        return Err(bad(format!(
            "l2_norm_heads: {} columns in heads of {d}",
            x.cols
        )));
    }
    let xp = x.f32_ptr("l2_norm_heads")?;
    check(
        unsafe { ffi::ifd_l2_norm_heads(xp, int(x.len() / d), int(d), eps, scale, s) },
        "l2_norm_heads",
    )
}

/// a, b [n, n_v_heads]; a_log, dt_bias [n_v_heads] -> g, beta [n, n_v_heads]
#[allow(clippy::too_many_arguments)]
pub fn delta_gates(
    s: Stream,
    a: &CudaTensor,
    b: &CudaTensor,
    a_log: &CudaWeight,
    dt_bias: &CudaWeight,
    g: &mut CudaTensor,
    beta: &mut CudaTensor,
) -> Result<()> {
    let (alp, heads) = a_log.vector("delta_gates")?;
    let (dtp, dt_len) = dt_bias.vector("delta_gates")?;
    if a.rows != b.rows || a.cols != heads || b.cols != heads || dt_len != heads {
        return Err(bad(format!(
            "delta_gates: a [{}, {}], b [{}, {}] for {heads} heads ({dt_len} biases)",
            a.rows, a.cols, b.rows, b.cols
        )));
    }
    let (ap, bp) = (a.f32_ptr("delta_gates")?, b.f32_ptr("delta_gates")?);
    g.prepare(a.rows, heads, Act::F32)?;
    beta.prepare(a.rows, heads, Act::F32)?;
    check(
        unsafe {
            ffi::ifd_delta_gates(
                ap,
                bp,
                alp,
                dtp,
                int(a.rows),
                int(heads),
                g.f32_ptr("delta_gates")?,
                beta.f32_ptr("delta_gates")?,
                s,
            )
        },
        "delta_gates",
    )
}

/// The tensor-core chunked form's workspace for this pass, grown in `slot` as needed: its
/// address, or null where the pass has no pieces or the shape takes the SIMT form.
pub fn pieces_workspace(
    dev: &Arc<Device>,
    slot: &mut Option<DeviceBuffer>,
    batch: &CudaBatch,
    cfg: &LinearAttnConfig,
) -> Result<*mut f32> {
    let (dk, dv) = (int(cfg.k_head_dim), int(cfg.v_head_dim));
    if batch.delta_pieces == 0 || unsafe { ffi::ifd_delta_pieces_supported(dk, dv) } == 0 {
        return Ok(std::ptr::null_mut());
    }
    let floats = unsafe {
        ffi::ifd_delta_pieces_ws_floats(int(batch.delta_pieces), int(cfg.n_v_heads), dk, dv)
    };
    if slot.as_ref().is_none_or(|b| b.bytes() < floats * 4) {
        *slot = None; // the old one goes first
        *slot = Some(dev.alloc((floats * 4).next_power_of_two())?);
    }
    Ok(slot.as_ref().expect("just made").at::<f32>(0))
}

/// The gated delta rule of every chunk: the recurrent step for one-token chunks, the
/// chunked form for longer ones (each kernel only where the pass has such chunks): on
/// tensor cores where `pieces_ws` is given (see [`pieces_workspace`]), else the SIMT form.
/// q, k [n, key_dim], v [n, value_dim], g, beta [n, n_v_heads] -> out [n, value_dim]
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule(
    s: Stream,
    q: &CudaTensor,
    k: &CudaTensor,
    v: &CudaTensor,
    g: &CudaTensor,
    beta: &CudaTensor,
    kv: &mut CudaKv,
    layer: usize,
    batch: &CudaBatch,
    cfg: &LinearAttnConfig,
    pieces_ws: *mut f32,
    out: &mut CudaTensor,
) -> Result<()> {
    let n = batch.n_tokens;
    let delta_elems = kv.state.layout.delta_elems;
    crate::backend::check_delta_rule_inputs(n, q, k, v, g, beta, delta_elems, cfg)?;
    let state = kv.state.delta(layer)?;
    let name = "gated_delta_rule";
    let (qp, kp, vp) = (q.f32_ptr(name)?, k.f32_ptr(name)?, v.f32_ptr(name)?);
    let (gp, bp) = (g.f32_ptr(name)?, beta.f32_ptr(name)?);
    out.prepare(n, cfg.value_dim(), Act::F32)?;
    let op = out.f32_ptr(name)?;
    let (nk, nv, dk, dv) = (
        int(cfg.n_k_heads),
        int(cfg.n_v_heads),
        int(cfg.k_head_dim),
        int(cfg.v_head_dim),
    );
    let chunks = (batch.chunks(), int(batch.n_chunks));
    if batch.one_token_chunks {
        check(
            unsafe {
                ffi::ifd_delta_rule_recurrent(
                    qp, kp, vp, gp, bp, state, chunks.0, chunks.1, nk, nv, dk, dv, op, s,
                )
            },
            "gated delta rule (recurrent step)",
        )?;
    }
    if batch.longer_chunks && !pieces_ws.is_null() {
        return check(
            unsafe {
                ffi::ifd_delta_rule_pieces(
                    qp,
                    kp,
                    vp,
                    gp,
                    bp,
                    state,
                    chunks.0,
                    chunks.1,
                    batch.pieces(),
                    batch.piece_base(),
                    int(batch.delta_pieces),
                    nk,
                    nv,
                    dk,
                    dv,
                    pieces_ws,
                    op,
                    s,
                )
            },
            "gated delta rule (chunked, tensor cores)",
        );
    }
    if batch.longer_chunks {
        if unsafe { ffi::ifd_delta_rule_chunked_supported(dk) } == 0 {
            return Err(RuntimeError::Device(format!(
                "gated delta rule: key heads of {dk} do not fit the chunked kernel's shared \
                 memory on this device"
            )));
        }
        check(
            unsafe {
                ffi::ifd_delta_rule_chunked(
                    qp, kp, vp, gp, bp, state, chunks.0, chunks.1, nk, nv, dk, dv, op, s,
                )
            },
            "gated delta rule (chunked)",
        )?;
    }
    Ok(())
}

/// x, z [n, heads * d], w [d] -> out bf16 [n, heads * d]
pub fn gated_rms_norm(
    s: Stream,
    x: &CudaTensor,
    z: &CudaTensor,
    w: &CudaWeight,
    d: usize,
    eps: f32,
    out: &mut CudaTensor,
) -> Result<()> {
    let (wp, wlen) = w.vector("gated_rms_norm")?;
    if x.rows != z.rows || x.cols != z.cols || wlen != d || d == 0 || !x.cols.is_multiple_of(d) {
        return Err(bad(format!(
            "gated_rms_norm: x [{}, {}], z [{}, {}], a weight of {wlen} for heads of {d}",
            x.rows, x.cols, z.rows, z.cols
        )));
    }
    let (xp, zp) = (x.f32_ptr("gated_rms_norm")?, z.f32_ptr("gated_rms_norm")?);
    out.prepare(x.rows, x.cols, Act::Bf16)?;
    check(
        unsafe {
            ffi::ifd_gated_rms_norm(
                xp,
                zp,
                wp,
                int(x.len() / d),
                int(d),
                eps,
                out.bf16_ptr("gated_rms_norm")?,
                s,
            )
        },
        "gated_rms_norm",
    )
}
