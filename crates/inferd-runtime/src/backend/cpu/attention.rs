//! Causal grouped-query attention over the paged KV cache.
//!
//! Work is split into items of (chunk, kv head, tile of up to [`MAX_TILE`]
//! consecutive query tokens of that chunk). An item handles, for every token
//! of its tile, the `group` query heads that share its kv head: its rows are
//! (token, query head) pairs. For each KV block of the sequence's block table
//! it computes the scores of all its rows against that block while the block
//! is in cache (each token only up to its causal limit pos + 1), then a softmax
//! per row, then the weighted sums of V, again block by block for all rows. A
//! prefill chunk thus reads each K/V block once per tile instead of once per
//! token; a decode step is a tile of one token.
//!
//! Batch invariance (bit for bit): tiling only changes which rows are computed
//! while a block is hot, never a row's own operation sequence, which is always
//! `score[p] = dot(q, k[p]) * scale` for p = 0..=pos, the max, `exp(score - max)`
//! summed in increasing p, a multiply by `1 / sum`, then `dst += w[p] · v[p]` for
//! p in increasing order. A row's output is thus the same whatever its tile,
//! its place in it, the chunking of the prompt, the batch or the thread count.
//! The kernels keep it: [`simd::dot_rows`] interleaves 8 K rows' dots and
//! [`simd::axpy_rows`] keeps an output row in registers across V rows, each
//! bit-identical to [`simd::dot`] / [`simd::axpy`] one row at a time; `exp` is
//! std's f32 `exp`; nothing is fused (no FMA contraction).
//!
//! 8-bit KV (Q8, Fp8) keeps it too: a K or V block is first dequantized (its first rows the
//! tile needs) into a per-item f32 scratch, one exact product `q · scale` per
//! value, so every row sees the same f32 K/V values whatever item dequantized
//! them, and the f32 kernels above run unchanged.
//!
//! 8-bit K rows are stored minus the layer's K offset c (one `[head_dim]` vector per
//! kv head, see [`crate::kv`]) and the scores use the dequantized `k - c` as they
//! are, with nothing added back: `q·(k_p - c) = q·k_p - q·c` shifts all of a query
//! row's scores by the same amount, and the softmax (max subtracted, then `exp`,
//! normalized) gives the same weights for any shift. `store_kv` subtracts c inside
//! the quantizer, per row, so batch invariance is untouched.
//!
//! Items run in a named `#[target_feature(enable = "avx2,fma")]` function (a
//! closure given to [`simd::with_avx2`] was not inlined into it and ran as SSE).

use rayon::prelude::*;

use super::batch::CpuBatch;
use super::simd;
use super::tensor::CpuTensor;
use super::{CpuKv, KvPlane};
use crate::backend::AttnConfig;

/// Most query tokens per work item (the K/V reuse factor of a prefill).
const MAX_TILE: usize = 32;
/// Tiles shrink (down to one token) to give each thread at least this many items.
const MIN_ITEMS_PER_THREAD: usize = 4;

/// Writes this pass's K/V rows into their cache slots of `layer`.
/// k, v: [n_tokens, n_kv_heads * head_dim]
pub fn store_kv(kv: &mut CpuKv, layer: usize, k: &CpuTensor, v: &CpuTensor, b: &CpuBatch) {
    let l = kv.layout;
    let d = l.head_dim;
    let (kc, vc) = (&mut kv.k[layer], &mut kv.v[layer]);
    for (t, &(block, slot)) in b.slots.iter().enumerate() {
        for h in 0..l.n_kv_heads {
            let row = l.row(block as usize, h, slot as usize);
            kc.store_row(row, h, &k.row(t)[h * d..(h + 1) * d]);
            vc.store_row(row, h, &v.row(t)[h * d..(h + 1) * d]);
        }
    }
}

/// Query tokens per tile for a pass of `n_tokens` over `n_kv_heads` on `threads` workers.
fn tile_size(n_tokens: usize, n_kv_heads: usize, threads: usize) -> usize {
    (n_tokens * n_kv_heads / (MIN_ITEMS_PER_THREAD * threads.max(1))).clamp(1, MAX_TILE)
}

/// q: [n_tokens, n_heads * head_dim] -> out [n_tokens, n_heads * head_dim] (shaped so)
pub fn attend(
    q: &CpuTensor,
    kv: &CpuKv,
    layer: usize,
    b: &CpuBatch,
    cfg: &AttnConfig,
    out: &mut CpuTensor,
) {
    let d = cfg.head_dim;
    let n_kv = cfg.n_kv_heads;
    let group = cfg.n_heads / n_kv;
    let tile = tile_size(q.rows, n_kv, rayon::current_num_threads());
    // Rows accumulate `w[p] · v[p]` from zero.
    out.data.fill(0.0);
    let (kc, vc) = (&kv.k[layer], &kv.v[layer]);

    // The output of one (token, kv head) is `group` adjacent query heads: [group, head_dim].
    let mut cells: Vec<Option<&mut [f32]>> = out.data.chunks_mut(group * d).map(Some).collect(); // [n_tokens * n_kv_heads]
                                                                                                 // Those cells reordered by (chunk, kv head, token), so that each tile's are adjacent.
    let mut ordered: Vec<&mut [f32]> = Vec::with_capacity(cells.len()); // [n_tokens * n_kv_heads]
    let mut tiles: Vec<(usize, usize, usize, usize)> = Vec::new(); // (chunk, kv head, first token, n tokens)
    for (ci, s) in b.seqs.iter().enumerate() {
        let end = s.token_start + s.n_tokens;
        for h in 0..n_kv {
            for t0 in (s.token_start..end).step_by(tile) {
                let nt = tile.min(end - t0);
                tiles.push((ci, h, t0, nt));
                ordered.extend((t0..t0 + nt).map(|t| cells[t * n_kv + h].take().unwrap()));
            }
        }
    }
    let mut rest = &mut ordered[..];
    let mut items = Vec::with_capacity(tiles.len()); // [n_tiles]
    for &(ci, h, t0, nt) in &tiles {
        let (dst, tail) = std::mem::take(&mut rest).split_at_mut(nt); // [nt] of [group, head_dim]
        rest = tail;
        let item = Item {
            kv,
            kc,
            vc,
            q,
            positions: &b.positions[t0..t0 + nt],
            block_table: kv.tables.row(b.seqs[ci].table),
            head: h,
            t0,
            group,
            d,
            scale: cfg.scale,
        };
        items.push((item, dst));
    }
    items
        .into_par_iter()
        .for_each_init(Scratch::default, |scratch, (item, dst)| {
            item.run(scratch, dst);
        });
}

/// Per-worker buffers reused across items.
#[derive(Default)]
struct Scratch {
    /// [nt, group, cmax] attention weights of the item's rows
    scores: Vec<f32>,
    /// [block_size, head_dim] one dequantized K or V block (8-bit dtypes only)
    rows: Vec<f32>,
}

/// One tile: `positions.len()` consecutive query tokens of a chunk × one kv head.
struct Item<'a> {
    kv: &'a CpuKv,
    kc: &'a KvPlane,
    vc: &'a KvPlane,
    /// [n_tokens, n_heads * head_dim]
    q: &'a CpuTensor,
    /// Position of each tile token in its sequence.  // [nt]
    positions: &'a [u32],
    block_table: &'a [u32],
    head: usize,
    /// Batch row of the tile's first token.
    t0: usize,
    group: usize,
    d: usize,
    scale: f32,
}

impl Item<'_> {
    /// dst: [nt] of [group, d]
    fn run(&self, scratch: &mut Scratch, dst: &mut [&mut [f32]]) {
        #[cfg(target_arch = "x86_64")]
        if simd::has_avx2() {
            // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
            return unsafe { self.run_avx2(scratch, dst) };
        }
        self.body(scratch, dst)
    }

    /// [`Self::body`] compiled with AVX2 (a named `target_feature` function: a closure
    /// passed to [`simd::with_avx2`] is not reliably inlined into it, so would stay SSE).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self, scratch: &mut Scratch, dst: &mut [&mut [f32]]) {
        self.body(scratch, dst)
    }

    /// dst: [nt] of [group, d]
    #[inline(always)]
    fn body(&self, scratch: &mut Scratch, dst: &mut [&mut [f32]]) {
        let (d, g, h) = (self.d, self.group, self.head);
        let layout = &self.kv.layout;
        let bs = layout.block_size;
        let Scratch { scores, rows } = scratch;
        let nt = dst.len();
        let ctx = |i: usize| self.positions[i] as usize + 1; // causal: positions 0..=pos
        let cmax = (0..nt).map(ctx).max().unwrap_or(0);
        let qs = |i: usize| &self.q.row(self.t0 + i)[h * g * d..(h + 1) * g * d]; // [group, d]
        scores.clear();
        scores.resize(nt * g * cmax, 0.0); // [nt, group, cmax]; row (i, j) uses [..ctx(i)]
        let blocks = self.block_table.iter().enumerate().take(cmax.div_ceil(bs));

        // 1. scores = q·k * scale, every row against each block while it is hot
        for (bi, &block) in blocks.clone() {
            let p0 = bi * bs;
            let used = bs.min(cmax - p0); // slots of this block any row reads
            let kb = self.kc.head_rows(layout, block as usize, h, used, rows); // [used, d]
            for i in 0..nt {
                let n = bs.min(ctx(i).saturating_sub(p0)); // this block's rows in i's window
                let q = qs(i);
                for j in 0..g {
                    let qj = &q[j * d..(j + 1) * d];
                    let row = &mut scores[(i * g + j) * cmax + p0..][..n];
                    let mut s = 0;
                    while s + 8 <= n {
                        let k = &kb[s * d..(s + 8) * d]; // [8, d]
                        for (x, dot) in row[s..s + 8].iter_mut().zip(simd::dot_rows::<8>(qj, k)) {
                            *x = dot * self.scale;
                        }
                        s += 8;
                    }
                    for (s, x) in row.iter_mut().enumerate().skip(s) {
                        *x = simd::dot(qj, &kb[s * d..(s + 1) * d]) * self.scale;
                    }
                }
            }
        }
        // 2. softmax per row
        for i in 0..nt {
            for j in 0..g {
                let row = &mut scores[(i * g + j) * cmax..][..ctx(i)];
                let max = simd::max(row);
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
        }
        // 3. out = Σ p · v, every row against each block while it is hot
        for (bi, &block) in blocks {
            let p0 = bi * bs;
            let used = bs.min(cmax - p0);
            let vb = self.vc.head_rows(layout, block as usize, h, used, rows); // [used, d]
            for (i, out) in dst.iter_mut().enumerate() {
                let n = bs.min(ctx(i).saturating_sub(p0));
                for j in 0..g {
                    let w = &scores[(i * g + j) * cmax + p0..][..n];
                    let o = &mut out[j * d..(j + 1) * d];
                    simd::axpy_rows(o, w, vb); // = axpy(o, w[s], v[s]) for s in order
                }
            }
        }
    }
}
