//! AVX2 + FMA + F16C dots of FOUR consecutive weight rows with one activation row.
//!
//! The single-row kernels ([`super::avx2`]) are instruction bound for 4/5-bit
//! weights: per block they convert, scale and accumulate one 8-lane vector, and
//! load the activation block, its `d` and its `s`. Here each activation block is
//! loaded once for four rows, and the four rows' integer products are reduced
//! together before any float work:
//!
//! * `_mm256_maddubs_epi16` per row (i16x16), then three `_mm256_hadd_epi16` fold
//!   the four rows into one i16x16 whose pairs belong to rows 0..3 (low 128 bits:
//!   bytes 0..15, high: 16..31); one `_mm256_madd_epi16` with ones widens it to
//!   i32 lanes `[r0, r1, r2, r3, r0, r1, r2, r3]`. No saturation: an i16 there
//!   sums 8 products, at most `8 * 31 * 127 = 31496 < 32767`.
//! * The four rows' f16 scales are packed into one u64, broadcast to both halves
//!   and converted by one `_mm256_cvtph_ps`; one multiply by the activation `d`
//!   and one FMA update a single accumulator for all four rows.
//!
//! Results differ from the single-row kernels only by float summation order.

use crate::activation::ActRow;
use std::arch::x86_64::*;

/// Raw f16 bits at `p` (unaligned).
#[inline(always)]
unsafe fn f16_bits(p: *const u8) -> u64 {
    std::ptr::read_unaligned(p as *const u16) as u64
}

/// The f16 at byte `off` of block `blk` of each of the four rows (`rb` bytes
/// apart), as 8 f32 lanes `[r0, r1, r2, r3, r0, r1, r2, r3]`.
#[inline(always)]
pub(crate) unsafe fn f16x4(p: *const u8, rb: usize) -> __m256 {
    let bits = f16_bits(p)
        | f16_bits(p.add(rb)) << 16
        | f16_bits(p.add(2 * rb)) << 32
        | f16_bits(p.add(3 * rb)) << 48;
    _mm256_cvtph_ps(_mm_set1_epi64x(bits as i64))
}

/// 16 packed bytes -> 32 nibbles (low nibbles in the low 128 bits, high above),
/// from a broadcast load, without a cross-lane shuffle.
#[inline(always)]
pub(crate) unsafe fn nibbles32(p: *const u8) -> __m256i {
    let q = _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i));
    let both = _mm256_blend_epi32(q, _mm256_srli_epi16(q, 4), 0xF0);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// Prefetch, two groups ahead (`8 rb` bytes after `wp`), the part of that group
/// that block `b` stands for: a 4-row group is `nb` steps of `step = 4 * block_bytes`
/// bytes, and each step's cache lines (at most 3 for `step <= 136`) are touched.
/// Interleaved reads of four rows defeat the hardware prefetcher when weights stream
/// from DRAM (measured: Q5_0 151936x896 at 8 GB/s without this, 20 GB/s with it).
#[inline(always)]
pub(crate) unsafe fn prefetch_ahead(wp: *const u8, rb: usize, step: usize, b: usize) {
    // Prefetches never fault; wrapping_add keeps the pointer math defined.
    let p = wp.wrapping_add(8 * rb + step * b);
    _mm_prefetch(p as *const i8, _MM_HINT_T0);
    _mm_prefetch(p.wrapping_add(64) as *const i8, _MM_HINT_T0);
    if step > 128 {
        _mm_prefetch(p.wrapping_add(128) as *const i8, _MM_HINT_T0);
    }
}

/// Σ u_r·a for four unsigned weight vectors, as i32 lanes `[r0..r3, r0..r3]`.
#[inline(always)]
pub(crate) unsafe fn dot4_u8i8(u: [__m256i; 4], a: __m256i) -> __m256i {
    let p0 = _mm256_maddubs_epi16(u[0], a);
    let p1 = _mm256_maddubs_epi16(u[1], a);
    let p2 = _mm256_maddubs_epi16(u[2], a);
    let p3 = _mm256_maddubs_epi16(u[3], a);
    let h = _mm256_hadd_epi16(_mm256_hadd_epi16(p0, p1), _mm256_hadd_epi16(p2, p3));
    _mm256_madd_epi16(h, _mm256_set1_epi16(1))
}

/// Σ w_r·a for four signed weight vectors (Q8_0), as i32 lanes `[r0..r3, r0..r3]`.
/// The i16 pair sums reach 2·128·127, so rows are widened to i32 before folding.
#[inline(always)]
unsafe fn dot4_i8i8(w: [__m256i; 4], a: __m256i) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    // |w| * (a * sign(w)) == w * a, with |w| read as unsigned.
    let p = |w: __m256i| {
        let m = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
        _mm256_madd_epi16(m, ones)
    };
    let (p0, p1, p2, p3) = (p(w[0]), p(w[1]), p(w[2]), p(w[3]));
    _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3))
}

/// `acc[r] + acc[r + 4] + k * side[r]` for r in 0..4.
#[inline(always)]
pub(crate) unsafe fn finish(acc: __m256, side: __m256, k: f32) -> [f32; 4] {
    let sum = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    let res = _mm_fmadd_ps(_mm_set1_ps(k), _mm256_castps256_ps128(side), sum);
    let mut out = [0f32; 4];
    _mm_storeu_ps(out.as_mut_ptr(), res);
    out
}

/// Q5_0: four rows of `rb` bytes at `w` x one Act32 row:
/// `Σ d_w (d_a Σ q·a - 16 s_a)` per row.
///
/// # Safety
/// AVX2/FMA/F16C; `w` holds 4 rows of `rb` bytes (whole Q5_0 blocks) and `a` is an
/// `Act32` row of `rb / 22 * 32` elements.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_q5_0(w: &[u8], rb: usize, a: &ActRow) -> [f32; 4] {
    let nb = rb / 22;
    debug_assert!(w.len() >= 4 * rb && a.qs.len() >= nb * 32 && a.s.len() >= nb);
    let (wp, ap) = (w.as_ptr(), a.qs.as_ptr() as *const u8);
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let sixteen = _mm256_set1_epi8(16);
    // 5-bit levels of one block of one row.
    let levels = |blk: *const u8| {
        let qh = std::ptr::read_unaligned(blk.add(2) as *const i32);
        let hb = _mm256_shuffle_epi8(_mm256_set1_epi32(qh), spread);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit);
        _mm256_or_si256(nibbles32(blk.add(6)), _mm256_and_si256(set, sixteen))
    };
    let (mut acc, mut offs) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for b in 0..nb {
        prefetch_ahead(wp, rb, 4 * 22, b);
        let blk = wp.add(22 * b);
        let u = [
            levels(blk),
            levels(blk.add(rb)),
            levels(blk.add(2 * rb)),
            levels(blk.add(3 * rb)),
        ];
        let p = dot4_u8i8(u, _mm256_loadu_si256(ap.add(32 * b) as *const __m256i));
        let dw = f16x4(blk, rb);
        let scale = _mm256_mul_ps(dw, _mm256_set1_ps(*a.d.get_unchecked(b)));
        acc = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(p), acc);
        offs = _mm256_fmadd_ps(dw, _mm256_set1_ps(*a.s.get_unchecked(b)), offs);
    }
    finish(acc, offs, -16.0)
}

/// Q8_0: four rows x one Act32 row: `Σ d_w d_a Σ q·a` per row.
///
/// # Safety
/// As [`dot4_q5_0`], for Q8_0 blocks (34 bytes).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_q8_0(w: &[u8], rb: usize, a: &ActRow) -> [f32; 4] {
    let nb = rb / 34;
    debug_assert!(w.len() >= 4 * rb && a.qs.len() >= nb * 32 && a.d.len() >= nb);
    let (wp, ap) = (w.as_ptr(), a.qs.as_ptr() as *const u8);
    let ld = |p: *const u8| _mm256_loadu_si256(p as *const __m256i);
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        prefetch_ahead(wp, rb, 4 * 34, b);
        let blk = wp.add(34 * b);
        let q = [
            ld(blk.add(2)),
            ld(blk.add(rb + 2)),
            ld(blk.add(2 * rb + 2)),
            ld(blk.add(3 * rb + 2)),
        ];
        let p = dot4_i8i8(q, ld(ap.add(32 * b)));
        let scale = _mm256_mul_ps(f16x4(blk, rb), _mm256_set1_ps(*a.d.get_unchecked(b)));
        acc = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(p), acc);
    }
    finish(acc, _mm256_setzero_ps(), 0.0)
}

/// Shared body of Q4_0 / Q4_1 for four rows (block `bb` bytes, nibbles at `qoff`,
/// side f16 at `extra`): per row `Σ d_w d_a Σ q·a + k Σ c_w s_a`.
#[inline(always)]
unsafe fn dot4_q4_pair(
    w: &[u8],
    rb: usize,
    a: &ActRow,
    bb: usize,
    qoff: usize,
    extra: usize,
    k: f32,
) -> [f32; 4] {
    let nb = rb / bb;
    debug_assert!(w.len() >= 4 * rb && a.qs.len() >= nb * 32 && a.s.len() >= nb);
    let (wp, ap) = (w.as_ptr(), a.qs.as_ptr() as *const u8);
    let (mut acc, mut side) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for b in 0..nb {
        prefetch_ahead(wp, rb, 4 * bb, b);
        let blk = wp.add(bb * b);
        let u = [
            nibbles32(blk.add(qoff)),
            nibbles32(blk.add(rb + qoff)),
            nibbles32(blk.add(2 * rb + qoff)),
            nibbles32(blk.add(3 * rb + qoff)),
        ];
        let p = dot4_u8i8(u, _mm256_loadu_si256(ap.add(32 * b) as *const __m256i));
        let dw = f16x4(blk, rb);
        let scale = _mm256_mul_ps(dw, _mm256_set1_ps(*a.d.get_unchecked(b)));
        acc = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(p), acc);
        let cw = if extra == 0 {
            dw
        } else {
            f16x4(blk.add(extra), rb)
        };
        side = _mm256_fmadd_ps(cw, _mm256_set1_ps(*a.s.get_unchecked(b)), side);
    }
    finish(acc, side, k)
}

/// Q4_0: four rows x one Act32 row: `Σ d_w (d_a Σ q·a - 8 s_a)` per row.
///
/// # Safety
/// As [`dot4_q5_0`], for Q4_0 blocks (18 bytes).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_q4_0(w: &[u8], rb: usize, a: &ActRow) -> [f32; 4] {
    dot4_q4_pair(w, rb, a, 18, 2, 0, -8.0)
}

/// Q4_1: four rows x one Act32 row: `Σ d_w d_a Σ q·a + m_w s_a` per row.
///
/// # Safety
/// As [`dot4_q5_0`], for Q4_1 blocks (20 bytes).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_q4_1(w: &[u8], rb: usize, a: &ActRow) -> [f32; 4] {
    dot4_q4_pair(w, rb, a, 20, 4, 2, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activation::Act32;
    use crate::level::detected_level;
    use crate::{quantize_row, DType, SimdLevel};

    /// Deterministic pseudo-random values in [-1, 1).
    fn values(seed: u64, len: usize) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    type One = unsafe fn(&[u8], &ActRow) -> f32;
    type Four = unsafe fn(&[u8], usize, &ActRow) -> [f32; 4];

    /// dot4 equals four single-row dots up to float summation order: checked
    /// against 1e-6 of Σ|terms| (a bound on the summation-order difference).
    fn check(dtype: DType, one: One, four: Four) {
        if detected_level() < SimdLevel::Avx2 {
            return;
        }
        for cols in [32usize, 64, 96, 896] {
            let w: Vec<u8> = (0..4)
                .flat_map(|r| quantize_row(dtype, &values(r + 1, cols)))
                .collect(); // [4, row_bytes]
            let rb = w.len() / 4;
            let x = values(99, cols); // [1, cols]
            let act = Act32::quantize(&x, 1, cols);
            let a = act.row(0);
            // SAFETY: AVX2 detected; rows and activations have matching sizes.
            let got = unsafe { four(&w, rb, &a) };
            for r in 0..4 {
                let want = unsafe { one(&w[r * rb..(r + 1) * rb], &a) };
                // Magnitude bound: Σ|w||x| from the dequantized row.
                let mut wf = vec![0f32; cols];
                crate::dequantize_row(dtype, &w[r * rb..(r + 1) * rb], &mut wf);
                let mag: f32 = wf.iter().zip(&x).map(|(p, q)| (p * q).abs()).sum::<f32>();
                assert!(
                    (got[r] - want).abs() <= 1e-6 * mag,
                    "{dtype:?} cols={cols} row {r}: dot4 {} vs dot {}",
                    got[r],
                    want
                );
            }
        }
    }

    #[test]
    fn dot4_q5_0_matches_single_rows() {
        check(DType::Q5_0, super::super::avx2::dot_q5_0, dot4_q5_0);
    }

    #[test]
    fn dot4_q8_0_matches_single_rows() {
        check(DType::Q8_0, super::super::avx2::dot_q8_0, dot4_q8_0);
    }

    #[test]
    fn dot4_q4_0_matches_single_rows() {
        check(DType::Q4_0, super::super::avx2::dot_q4_0, dot4_q4_0);
    }

    #[test]
    fn dot4_q4_1_matches_single_rows() {
        check(DType::Q4_1, super::super::avx2::dot_q4_1, dot4_q4_1);
    }
}
