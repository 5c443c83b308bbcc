//! Causal grouped-query attention over the paged KV cache.
//!
//! Work is split into items of (chunk, kv head, tile of up to [`MAX_TILE`]
//! consecutive query tokens of that chunk, segment of about [`SEGMENT_POSITIONS`]
//! positions). An item handles, for every token of its tile, the `group` query heads
//! that share its kv head: its rows are (token, query head) pairs. It walks the
//! segment's KV blocks once, each block while it is in cache, with an online softmax
//! per row (flash attention): the block's scores of every row that reaches it (each
//! token only up to its causal limit pos + 1), the row's running maximum and sum
//! rescaled when the maximum grows, and the block's weighted V rows added to the row's
//! partial output. Each row's segments are then merged in order and divided by the sum.
//! A prefill chunk thus reads each K/V block once per tile instead of once per token,
//! no row's scores outlive their block, and one long decode row (as many tiles as KV
//! heads) still spreads over the threads by its segments.
//!
//! Batch invariance (bit for bit): tiling only changes which rows are computed
//! while a block is hot, never a row's own operation sequence. A row's segments are
//! fixed by its positions (whole blocks from position 0). In each, from m = -inf and a
//! zero sum and output, for each block holding positions of the row's window, in order:
//! its scores `s[p] = dot(q, k[p]) · scale · log2(e)` ([`attn_simd::dot`]), their
//! maximum m' with m; if m' > m (m finite), the output and the sum times `exp2(m - m')`;
//! `w[p] = exp2(s[p] - m')` ([`attn_simd::exp2`]), the sum plus `Σ w[p]` in increasing
//! p, and `out[e] = fma(w[p], v[p][e], out[e])` for p in increasing order. Segments
//! merge left to right: M = max(m_a, m_b), `out = fma(out_b, exp2(m_b - M), out_a ·
//! exp2(m_a - M))`, the sums alike; at the end `out · (1 / sum)`. The kernels compute
//! each value the same way whichever rows and keys share a call, with AVX2 or without
//! (their tests check it bit for bit), so a row's output is the same whatever its tile,
//! its place in it, the chunking of the prompt, the batch or the thread count.
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

use rayon::prelude::*;

use super::attn_simd;
use super::batch::CpuBatch;
use super::tensor::CpuTensor;
use super::{CpuKv, KvPlane};
use crate::backend::AttnConfig;

/// Most query tokens per work item (the K/V reuse factor of a prefill).
const MAX_TILE: usize = 32;
/// Tiles shrink (down to one token) to give each thread at least this many items.
const MIN_ITEMS_PER_THREAD: usize = 4;
/// A row's window is walked in segments of about this many positions, each an item of
/// its own (so one long decode row spreads over the threads), merged in order after.
const SEGMENT_POSITIONS: usize = 512;

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

/// KV blocks of a segment: about [`SEGMENT_POSITIONS`] positions, whole blocks.
fn segment_blocks(block_size: usize) -> usize {
    (SEGMENT_POSITIONS / block_size.max(1)).max(1)
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
    let seg_len = segment_blocks(kv.layout.block_size) * kv.layout.block_size;
    let (kc, vc) = (&kv.k[layer], &kv.v[layer]);

    // The output of one (token, kv head) is `group` adjacent query heads: [group, head_dim].
    // [n_tokens * n_kv_heads]
    let mut cells: Vec<Option<&mut [f32]>> = out.data.chunks_mut(group * d).map(Some).collect();
    // Those cells reordered by (chunk, kv head, token), so that each tile's are adjacent.
    let mut ordered: Vec<&mut [f32]> = Vec::with_capacity(cells.len()); // [n_tokens * n_kv_heads]
    let mut tiles: Vec<Item<'_>> = Vec::new();
    let mut part_floats = 0;
    for (ci, s) in b.seqs.iter().enumerate() {
        let end = s.token_start + s.n_tokens;
        for h in 0..n_kv {
            for t0 in (s.token_start..end).step_by(tile) {
                let nt = tile.min(end - t0);
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
                    seg_len,
                };
                part_floats += item.segments() * item.rows() * (d + 2);
                tiles.push(item);
                ordered.extend((t0..t0 + nt).map(|t| cells[t * n_kv + h].take().unwrap()));
            }
        }
    }
    // Each (tile, segment)'s partial results: [segments, rows, d + 2] a tile.
    let mut parts = vec![0f32; part_floats];
    let mut work = Vec::new(); // (tile, segment, its partials [rows, d + 2])
    let mut rest = &mut parts[..];
    for item in &tiles {
        for seg in 0..item.segments() {
            let (part, tail) = std::mem::take(&mut rest).split_at_mut(item.rows() * (d + 2));
            rest = tail;
            work.push((item, seg, part));
        }
    }
    work.into_par_iter()
        .for_each_init(Scratch::default, |scratch, (item, seg, part)| {
            item.segment(scratch, seg, part);
        });
    // Each row's segments merged, in order, into its output.
    let mut rest = &mut ordered[..];
    let mut parts = &parts[..];
    let mut merges = Vec::with_capacity(tiles.len());
    for item in &tiles {
        let (dst, tail) = std::mem::take(&mut rest).split_at_mut(item.positions.len()); // [nt] of [group, d]
        rest = tail;
        let (part, more) = parts.split_at(item.segments() * item.rows() * (d + 2));
        parts = more;
        merges.push((item, part, dst));
    }
    merges
        .into_par_iter()
        .for_each(|(item, part, dst)| item.merge(part, dst));
}

/// Per-worker buffers reused across items.
#[derive(Default)]
struct Scratch {
    /// [rows, block_size] one block's scores, then weights, of the item's rows
    scores: Vec<f32>,
    /// the rows reaching a block
    active: Vec<usize>,
    /// [block_size, head_dim] one dequantized K block (8-bit dtypes only)
    k_rows: Vec<f32>,
    /// [block_size, head_dim] one dequantized V block (8-bit dtypes only)
    v_rows: Vec<f32>,
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
    /// Positions of a segment (whole blocks).
    seg_len: usize,
}

impl Item<'_> {
    /// Rows: (token, query head) pairs, token r / group, query head r % group.
    fn rows(&self) -> usize {
        self.positions.len() * self.group
    }

    /// Row r's window: positions 0..=pos (causal).
    fn ctx(&self, r: usize) -> usize {
        self.positions[r / self.group] as usize + 1
    }

    /// The tile's longest window.
    fn cmax(&self) -> usize {
        self.positions
            .iter()
            .map(|&p| p as usize + 1)
            .max()
            .unwrap_or(0)
    }

    /// Segments the tile's longest window spans.
    fn segments(&self) -> usize {
        self.cmax().div_ceil(self.seg_len)
    }

    /// Segment `seg` of every row reaching it, from a fresh softmax state: part[r] =
    /// [Σ w·v (d values), the maximum m, the sum of w], w = exp2(s - m).
    /// part: [rows, d + 2]
    fn segment(&self, scratch: &mut Scratch, seg: usize, part: &mut [f32]) {
        let (d, g, h) = (self.d, self.group, self.head);
        let layout = &self.kv.layout;
        let bs = layout.block_size;
        let scale = self.scale * std::f32::consts::LOG2_E;
        let Scratch {
            scores,
            active,
            k_rows,
            v_rows,
        } = scratch;
        let rows = self.rows();
        let ctx = |r: usize| self.ctx(r);
        let cmax = self.cmax();
        let q = |r: usize| {
            let (i, j) = (r / g, r % g);
            &self.q.row(self.t0 + i)[(h * g + j) * d..(h * g + j + 1) * d] // [d]
        };
        scores.clear();
        scores.resize(rows * bs, 0.0); // [rows, bs]
        for p in part.chunks_exact_mut(d + 2) {
            p[..d].fill(0.0);
            p[d] = f32::NEG_INFINITY;
            p[d + 1] = 0.0;
        }
        let first = seg * (self.seg_len / bs);
        let blocks = self.block_table.iter().enumerate().take(cmax.div_ceil(bs));

        for (bi, &block) in blocks.skip(first).take(self.seg_len / bs) {
            let p0 = bi * bs;
            let used = bs.min(cmax - p0); // slots of this block any row reads
            let kb = self.kc.head_rows(layout, block as usize, h, used, k_rows); // [used, d]
            let vb = self.vc.head_rows(layout, block as usize, h, used, v_rows); // [used, d]
            let key = |t: usize| &kb[t.min(used - 1) * d..(t.min(used - 1) + 1) * d]; // [d]
            active.clear();
            active.extend((0..rows).filter(|&r| ctx(r) > p0));

            // 1. scores, two rows × four keys or one row × eight keys a call (keys past
            //    `used` repeat the last and are not kept)
            let mut put = |r: usize, t0: usize, vals: &[f32]| {
                let n = bs.min(ctx(r) - p0).saturating_sub(t0).min(vals.len());
                for (x, v) in scores[r * bs + t0..][..n].iter_mut().zip(vals) {
                    *x = v * scale;
                }
            };
            let mut pairs = active.chunks_exact(2);
            for two in &mut pairs {
                for t0 in (0..used).step_by(4) {
                    let keys = std::array::from_fn(|j| key(t0 + j));
                    let s = attn_simd::dots::<2, 4>([q(two[0]), q(two[1])], keys);
                    put(two[0], t0, &s[..4]);
                    put(two[1], t0, &s[4..]);
                }
            }
            for &r in pairs.remainder() {
                for t0 in (0..used).step_by(8) {
                    let s = attn_simd::dots::<1, 8>([q(r)], std::array::from_fn(|j| key(t0 + j)));
                    put(r, t0, &s);
                }
            }

            // 2. per row: the running maximum, the weights, the sum and Σ w·v
            for &r in active.iter() {
                let n = bs.min(ctx(r) - p0); // this block's positions in r's window
                let w = &mut scores[r * bs..][..n];
                let (out, state) = part[r * (d + 2)..(r + 1) * (d + 2)].split_at_mut(d);
                let (max, sum) = (state[0], state[1]);
                let m = w.iter().copied().fold(max, f32::max);
                let mut sum = if m > max && max != f32::NEG_INFINITY {
                    let c = attn_simd::exp2(max - m);
                    for o in out.iter_mut() {
                        *o *= c;
                    }
                    sum * c
                } else {
                    sum
                };
                for x in w.iter_mut() {
                    *x -= m;
                }
                attn_simd::exp2_all(w);
                for &x in w.iter() {
                    sum += x;
                }
                attn_simd::axpy_rows(out, w, vb);
                state[0] = m;
                state[1] = sum;
            }
        }
    }

    /// Each row's segments (`part`: [segments, rows, d + 2]) merged in order into its
    /// output, divided by the sum: dst [nt] of [group, d].
    fn merge(&self, part: &[f32], dst: &mut [&mut [f32]]) {
        let (d, g) = (self.d, self.group);
        let rows = self.rows();
        let at = |seg: usize, r: usize| &part[(seg * rows + r) * (d + 2)..][..d + 2];
        for r in 0..rows {
            let out = &mut dst[r / g][(r % g) * d..(r % g + 1) * d];
            let first = at(0, r);
            out.copy_from_slice(&first[..d]);
            let (mut max, mut sum) = (first[d], first[d + 1]);
            for seg in 1..self.ctx(r).div_ceil(self.seg_len) {
                let p = at(seg, r);
                let m = max.max(p[d]);
                let (ca, cb) = (attn_simd::exp2(max - m), attn_simd::exp2(p[d] - m));
                for (o, &x) in out.iter_mut().zip(&p[..d]) {
                    *o = x.mul_add(cb, *o * ca);
                }
                sum = p[d + 1].mul_add(cb, sum * ca);
                max = m;
            }
            let inv = 1.0 / sum;
            for o in out.iter_mut() {
                *o *= inv;
            }
        }
    }
}
