//! The Gated DeltaNet's batch-level ops on the CPU: the delta rule of every chunk's
//! value heads (from and into their state slot), and the per-head element-wise
//! pieces around it (L2 norm, the decay and beta gates, the gated RMSNorm).

use rayon::prelude::*;

use super::batch::CpuBatch;
use super::delta_rule::{chunked, recurrent, HeadInputs};
use super::state::StatePool;
use super::tensor::CpuTensor;
use crate::model::LinearAttnConfig;

/// One (chunk, value head)'s work: its state and its output rows `[n_tokens, dv]`.
struct HeadWork<'a> {
    chunk: usize,
    head: usize,
    state: &'a mut [f32],
    out: Vec<f32>,
}

/// q, k [n, key_dim], v [n, value_dim], g, beta [n, n_v_heads] -> out [n, value_dim]
/// (already shaped); reads and updates the chunks' delta states of `layer`.
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule(
    q: &CpuTensor,
    k: &CpuTensor,
    v: &CpuTensor,
    g: &CpuTensor,
    beta: &CpuTensor,
    pool: &mut StatePool,
    layer: usize,
    b: &CpuBatch,
    cfg: &LinearAttnConfig,
    out: &mut CpuTensor,
) {
    let (nv, dk, dv) = (cfg.n_v_heads, cfg.k_head_dim, cfg.v_head_dim);
    let group = nv / cfg.n_k_heads;
    let per_slot = pool.layout.delta_elems; // nv * dk * dv
    let mut slots: Vec<Option<&mut [f32]>> =
        pool.delta[layer].chunks_mut(per_slot).map(Some).collect();
    let mut work = Vec::with_capacity(b.seqs.len() * nv);
    for (ci, s) in b.seqs.iter().enumerate() {
        let state = slots[s.state_slot as usize]
            .take()
            .expect("state slots are checked distinct in prepare_batch");
        for (head, st) in state.chunks_mut(dk * dv).enumerate() {
            work.push(HeadWork {
                chunk: ci,
                head,
                state: st,
                out: Vec::new(),
            });
        }
    }
    work.par_iter_mut().for_each(|w| {
        let s = &b.seqs[w.chunk];
        let (t0, n) = (s.token_start, s.n_tokens);
        let hk = w.head / group;
        // This head's inputs, gathered contiguous: q, k [n, dk], v [n, dv], g, beta [n].
        let cols = |m: &CpuTensor, h: usize, d: usize| -> Vec<f32> {
            (t0..t0 + n)
                .flat_map(|t| m.row(t)[h * d..(h + 1) * d].iter().copied())
                .collect()
        };
        let (hq, hkk, hv) = (cols(q, hk, dk), cols(k, hk, dk), cols(v, w.head, dv));
        let (hg, hb) = (cols(g, w.head, 1), cols(beta, w.head, 1));
        let x = HeadInputs {
            q: &hq,
            k: &hkk,
            v: &hv,
            g: &hg,
            beta: &hb,
            dk,
            dv,
        };
        if s.start_pos == 0 {
            w.state.fill(0.0);
        }
        w.out = vec![0.0; n * dv];
        if n == 1 {
            recurrent(x, w.state, &mut w.out);
        } else {
            chunked(x, s.start_pos, w.state, &mut w.out);
        }
    });
    let cols = out.cols;
    for w in &work {
        let s = &b.seqs[w.chunk];
        for (i, o) in w.out.chunks_exact(dv).enumerate() {
            let t = s.token_start + i;
            out.data[t * cols + w.head * dv..t * cols + (w.head + 1) * dv].copy_from_slice(o);
        }
    }
}

/// `x · rsqrt(Σx² + eps) · scale` per `d`-slice, in place.
pub fn l2_norm_heads(x: &mut [f32], d: usize, eps: f32, scale: f32) {
    for h in x.chunks_exact_mut(d) {
        let inv = 1.0 / (h.iter().map(|v| v * v).sum::<f32>() + eps).sqrt();
        for v in h.iter_mut() {
            *v = *v * inv * scale;
        }
    }
}

/// torch's `softplus` (beta 1, threshold 20): `x` above 20, else `ln(1 + eˣ)`.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// g = -exp(a_log) · softplus(a + dt_bias), beta = sigmoid(b), per row of n_v_heads.
pub fn delta_gates(
    a: &[f32],
    b: &[f32],
    a_log: &[f32],
    dt_bias: &[f32],
    g: &mut [f32],
    beta: &mut [f32],
) {
    let nv = a_log.len();
    for (((ga, ba), ar), br) in g
        .chunks_exact_mut(nv)
        .zip(beta.chunks_exact_mut(nv))
        .zip(a.chunks_exact(nv))
        .zip(b.chunks_exact(nv))
    {
        for h in 0..nv {
            ga[h] = -a_log[h].exp() * softplus(ar[h] + dt_bias[h]);
            ba[h] = sigmoid(br[h]);
        }
    }
}

/// `x · rsqrt(mean(x²) + eps) · w · silu(z)` per `d`-slice.  x, z, out [n, heads * d]
pub fn gated_rms_norm(x: &[f32], z: &[f32], w: &[f32], d: usize, eps: f32, out: &mut [f32]) {
    for ((o, xh), zh) in out
        .chunks_exact_mut(d)
        .zip(x.chunks_exact(d))
        .zip(z.chunks_exact(d))
    {
        let ms = xh.iter().map(|v| v * v).sum::<f32>() / d as f32;
        let r = 1.0 / (ms + eps).sqrt();
        for (((o, &xv), &zv), &wv) in o.iter_mut().zip(xh).zip(zh).zip(w) {
            *o = wv * (xv * r) * (zv * sigmoid(zv));
        }
    }
}

/// Per row, every `2d` slice's halves into `a` and `b`.  x [n, h*2d] -> a, b [n, h*d]
pub fn split_head_pairs(x: &[f32], d: usize, a: &mut [f32], b: &mut [f32]) {
    for ((pair, ah), bh) in x
        .chunks_exact(2 * d)
        .zip(a.chunks_exact_mut(d))
        .zip(b.chunks_exact_mut(d))
    {
        ah.copy_from_slice(&pair[..d]);
        bh.copy_from_slice(&pair[d..]);
    }
}

/// x *= sigmoid(gate)
pub fn sigmoid_mul(x: &mut [f32], gate: &[f32]) {
    for (v, &gv) in x.iter_mut().zip(gate) {
        *v *= sigmoid(gv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_follow_their_formulas() {
        let (mut g, mut beta) = (vec![0.0; 4], vec![0.0; 4]);
        delta_gates(
            &[0.0, 30.0, -1.0, 2.0],
            &[0.0, 1.0, -2.0, 100.0],
            &[0.0, 1.0f32.ln()],
            &[0.5, -0.5],
            &mut g,
            &mut beta,
        );
        assert!((g[0] + 0.5f32.exp().ln_1p()).abs() < 1e-6);
        assert!((g[1] + 29.5).abs() < 1e-5); // past the threshold softplus is the identity
        assert!((g[2] + (-0.5f32).exp().ln_1p()).abs() < 1e-6);
        assert_eq!(beta[0], 0.5);
        assert!((beta[1] - 1.0 / (1.0 + (-1.0f32).exp())).abs() < 1e-7);
        assert_eq!(beta[3], 1.0);
    }

    #[test]
    fn norms_and_splits() {
        let mut x = vec![3.0, 4.0, 0.0, 0.0];
        l2_norm_heads(&mut x, 2, 1e-6, 2.0);
        assert!((x[0] - 1.2).abs() < 1e-6 && (x[1] - 1.6).abs() < 1e-6);
        assert_eq!(&x[2..], &[0.0, 0.0]); // eps keeps a zero head finite
        let mut out = vec![0.0; 2];
        gated_rms_norm(&[1.0, -1.0], &[0.0, 50.0], &[2.0, 3.0], 2, 0.0, &mut out);
        assert_eq!(out[0], 0.0); // silu(0) = 0
        assert!((out[1] + 150.0).abs() < 1e-3);
        let (mut a, mut b) = (vec![0.0; 4], vec![0.0; 4]);
        split_head_pairs(&[1., 2., 3., 4., 5., 6., 7., 8.], 2, &mut a, &mut b);
        assert_eq!((a, b), (vec![1., 2., 5., 6.], vec![3., 4., 7., 8.]));
        let mut y = vec![2.0, 2.0];
        sigmoid_mul(&mut y, &[0.0, 1000.0]);
        assert_eq!(y, vec![1.0, 2.0]);
    }
}
