//! The Gated DeltaNet's causal depthwise convolution over Q|K|V, with its state.
//!
//! Channel c of token t is `silu(Σ_{i<taps} w[c][i] · x[t - (taps-1) + i][c])`: each
//! channel is filtered on its own over the last `taps` inputs. The `taps - 1` inputs
//! before a chunk's first token are the sequence's previous ones, kept in its state
//! slot (`[taps - 1, conv_dim]`, oldest first; zeros at position 0), and the slot keeps
//! the last `taps - 1` inputs after the chunk. A chunk's rows are computed on their
//! own (each sum in tap order), so a row does not depend on the batch or on how the
//! prompt was chunked.

use rayon::prelude::*;

use super::batch::CpuBatch;
use super::state::StatePool;
use super::tensor::CpuTensor;
use crate::model::LinearAttnConfig;

/// x [n, conv_dim], w [conv_dim * taps] -> out [n, conv_dim] (already shaped); the
/// chunks' conv states of `layer` in `pool` are read and updated.
pub fn causal_conv1d_silu(
    x: &CpuTensor,
    w: &[f32],
    pool: &mut StatePool,
    layer: usize,
    b: &CpuBatch,
    cfg: &LinearAttnConfig,
    out: &mut CpuTensor,
) {
    let (dim, taps) = (cfg.conv_dim(), cfg.conv_kernel);
    let hist = taps - 1;
    let per_slot = pool.layout.conv_elems; // hist * dim
                                           // The kernel tap-major, so each tap is one pass over contiguous channels.
    let mut wt = vec![0.0f32; taps * dim]; // [taps, dim]
    for c in 0..dim {
        for i in 0..taps {
            wt[i * dim + c] = w[c * taps + i];
        }
    }
    let plane = &mut pool.conv[layer];
    // Per chunk: its slot's state, its input rows and its output rows (disjoint).
    let mut states: Vec<Option<&mut [f32]>> = if per_slot == 0 {
        // One tap: nothing to keep.
        (0..pool.layout.slots)
            .map(|_| Some(Default::default()))
            .collect()
    } else {
        plane.chunks_mut(per_slot).map(Some).collect()
    };
    let mut outs: Vec<&mut [f32]> = Vec::with_capacity(b.seqs.len());
    let mut rest = &mut out.data[..];
    for s in &b.seqs {
        let (o, r) = rest.split_at_mut(s.n_tokens * dim);
        outs.push(o);
        rest = r;
    }
    let work: Vec<_> = b
        .seqs
        .iter()
        .zip(outs)
        .map(|(s, o)| {
            let state = states[s.state_slot as usize].take().unwrap_or_default();
            (s, state, o)
        })
        .collect();
    work.into_par_iter().for_each(|(s, state, o)| {
        if s.start_pos == 0 {
            state.fill(0.0);
        }
        let xs = &x.data[s.token_start * dim..(s.token_start + s.n_tokens) * dim]; // [n, dim]
                                                                                   // The input row at extended index e (0..hist are the state's rows).
        let row = |e: usize| -> &[f32] {
            if e < hist {
                &state[e * dim..(e + 1) * dim]
            } else {
                &xs[(e - hist) * dim..(e - hist + 1) * dim]
            }
        };
        for t in 0..s.n_tokens {
            let dst = &mut o[t * dim..(t + 1) * dim];
            dst.fill(0.0);
            for (i, wi) in wt.chunks_exact(dim).enumerate() {
                for ((d, &xv), &wv) in dst.iter_mut().zip(row(t + i)).zip(wi) {
                    *d += wv * xv;
                }
            }
            for d in dst.iter_mut() {
                *d /= 1.0 + (-*d).exp(); // SiLU: d · sigmoid(d)
            }
        }
        // The state after the chunk: the last `hist` rows of [state; xs].
        let total = hist + s.n_tokens;
        let mut kept = vec![0.0f32; hist * dim];
        for (j, k) in kept.chunks_exact_mut(dim).enumerate() {
            k.copy_from_slice(row(total - hist + j));
        }
        state.copy_from_slice(&kept);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::RopeConfig;
    use crate::batch::ForwardBatch;
    use crate::kv::{KvDtype, KvLayout, StateLayout};

    fn cfg() -> LinearAttnConfig {
        LinearAttnConfig {
            n_k_heads: 1,
            n_v_heads: 1,
            k_head_dim: 1,
            v_head_dim: 1,
            conv_kernel: 3,
        } // conv_dim 3
    }

    fn run(pool: &mut StatePool, x: &[f32], start: usize, w: &[f32]) -> Vec<f32> {
        let n = x.len() / 3;
        let mut fb = ForwardBatch::default();
        fb.push_in_slot(&vec![0; n], start, 1000, vec![0; 1000], 1, false);
        let kv = KvLayout {
            n_layers: 0,
            n_kv_heads: 1,
            head_dim: 2,
            block_size: 16,
            num_blocks: 1000,
            dtype: KvDtype::F32,
            state: pool.layout,
        };
        let rope = RopeConfig {
            theta: 1e4,
            rotary_dim: 2,
            style: crate::backend::RopeStyle::Neox,
        };
        let b = CpuBatch::standalone(&fb, &rope, &kv).unwrap();
        let xt = CpuTensor {
            data: x.to_vec(),
            rows: n,
            cols: 3,
        };
        let mut out = CpuTensor::zeros(n, 3);
        causal_conv1d_silu(&xt, w, pool, 0, &b, &cfg(), &mut out);
        out.data
    }

    #[test]
    fn equals_the_direct_convolution_in_any_chunking() {
        let layout = StateLayout::new(1, &cfg(), 2);
        let w: Vec<f32> = (0..9).map(|i| (i as f32 - 4.0) * 0.3).collect(); // [3 ch, 3 taps]
        let x: Vec<f32> = (0..7 * 3)
            .map(|i| ((i * 7 % 5) as f32 - 2.0) * 0.7)
            .collect();
        let silu = |v: f32| v / (1.0 + (-v).exp());
        let direct: Vec<f32> = (0..7 * 3)
            .map(|i| {
                let (t, c) = (i / 3, i % 3);
                let mut acc = 0.0;
                for tap in 0..3 {
                    let src = t as isize - 2 + tap as isize;
                    if src >= 0 {
                        acc += w[c * 3 + tap] * x[src as usize * 3 + c];
                    }
                }
                silu(acc)
            })
            .collect();
        let mut pool = StatePool::new(&layout);
        pool.conv[0].fill(9.0); // stale contents: position 0 must ignore them
        let whole = run(&mut pool, &x, 0, &w);
        for (a, b) in whole.iter().zip(&direct) {
            assert!((a - b).abs() < 1e-6, "{whole:?} vs {direct:?}");
        }
        // pieces of 1, 2 and 4 tokens through the state
        let mut pool = StatePool::new(&layout);
        let mut parts = run(&mut pool, &x[..3], 0, &w);
        parts.extend(run(&mut pool, &x[3..9], 1, &w));
        parts.extend(run(&mut pool, &x[9..], 3, &w));
        assert_eq!(parts, whole);
    }
}
