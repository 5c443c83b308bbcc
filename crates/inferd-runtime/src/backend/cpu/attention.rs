//! Causal grouped-query attention over the paged KV cache.
//!
//! Work is split into (token, kv-head) items; each item handles the `group`
//! query heads that share one KV head, so every K/V row read from the cache
//! serves all of them. Scores are computed block by block through the
//! sequence's block table, then a softmax, then the weighted sum of V.

use rayon::prelude::*;

use super::batch::CpuBatch;
use super::simd;
use super::tensor::CpuTensor;
use super::CpuKv;
use crate::backend::AttnConfig;

/// Writes this pass's K/V rows into their cache slots of `layer`.
/// k, v: [n_tokens, n_kv_heads * head_dim]
pub fn store_kv(kv: &mut CpuKv, layer: usize, k: &CpuTensor, v: &CpuTensor, b: &CpuBatch) {
    let l = kv.layout;
    let d = l.head_dim;
    let (kc, vc) = (&mut kv.k[layer], &mut kv.v[layer]);
    for (t, &(block, slot)) in b.slots.iter().enumerate() {
        for h in 0..l.n_kv_heads {
            let o = l.offset(block as usize, h, slot as usize);
            kc[o..o + d].copy_from_slice(&k.row(t)[h * d..(h + 1) * d]);
            vc[o..o + d].copy_from_slice(&v.row(t)[h * d..(h + 1) * d]);
        }
    }
}

/// q: [n_tokens, n_heads * head_dim] -> [n_tokens, n_heads * head_dim]
pub fn attend(
    q: &CpuTensor,
    kv: &CpuKv,
    layer: usize,
    b: &CpuBatch,
    cfg: &AttnConfig,
) -> CpuTensor {
    let d = cfg.head_dim;
    let group = cfg.n_heads / cfg.n_kv_heads;
    let mut out = CpuTensor::zeros(q.rows, q.cols);
    let (kc, vc) = (&kv.k[layer][..], &kv.v[layer][..]);
    // One output chunk per (token, kv head): the `group` query heads of that kv head are adjacent.
    out.data
        .par_chunks_mut(group * d)
        .enumerate()
        .for_each_init(Vec::new, |scores: &mut Vec<f32>, (item, dst)| {
            let t = item / cfg.n_kv_heads;
            let h = item % cfg.n_kv_heads;
            let seq = &b.seqs[b.seq_of_token[t] as usize];
            let ctx = b.positions[t] as usize + 1; // causal: positions 0..=pos
            let qs = &q.row(t)[h * group * d..(h + 1) * group * d]; // [group, head_dim]
            let item = Item {
                kv,
                kc,
                vc,
                block_table: &seq.block_table,
                head: h,
                ctx,
                group,
                d,
                scale: cfg.scale,
            };
            simd::with_avx2(|| item.run(qs, scores, dst));
        });
    out
}

struct Item<'a> {
    kv: &'a CpuKv,
    kc: &'a [f32],
    vc: &'a [f32],
    block_table: &'a [u32],
    head: usize,
    ctx: usize,
    group: usize,
    d: usize,
    scale: f32,
}

impl Item<'_> {
    /// qs: [group, d], scores: scratch, dst: [group, d]
    #[inline(always)]
    fn run(&self, qs: &[f32], scores: &mut Vec<f32>, dst: &mut [f32]) {
        let (ctx, d, g) = (self.ctx, self.d, self.group);
        let bs = self.kv.layout.block_size;
        scores.clear();
        scores.resize(g * ctx, 0.0); // [group, ctx]
                                     // 1. scores = q·k * scale
        for (bi, &block) in self.block_table.iter().enumerate().take(ctx.div_ceil(bs)) {
            let base = self.kv.layout.offset(block as usize, self.head, 0);
            let n = bs.min(ctx - bi * bs);
            for s in 0..n {
                let krow = &self.kc[base + s * d..base + (s + 1) * d];
                for j in 0..g {
                    scores[j * ctx + bi * bs + s] =
                        simd::dot(&qs[j * d..(j + 1) * d], krow) * self.scale;
                }
            }
        }
        // 2. softmax per query head
        for j in 0..g {
            let row = &mut scores[j * ctx..(j + 1) * ctx];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for x in row.iter_mut() {
                *x = (*x - max).exp();
                sum += *x;
            }
            let inv = 1.0 / sum;
            for x in row.iter_mut() {
                *x *= inv;
            }
        }
        // 3. out = Σ p · v
        for (bi, &block) in self.block_table.iter().enumerate().take(ctx.div_ceil(bs)) {
            let base = self.kv.layout.offset(block as usize, self.head, 0);
            let n = bs.min(ctx - bi * bs);
            for s in 0..n {
                let vrow = &self.vc[base + s * d..base + (s + 1) * d];
                for j in 0..g {
                    simd::axpy(
                        &mut dst[j * d..(j + 1) * d],
                        scores[j * ctx + bi * bs + s],
                        vrow,
                    );
                }
            }
        }
    }
}
