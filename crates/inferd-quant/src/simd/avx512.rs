//! AVX-512 (F + BW) dot products: the same algorithms as [`super::avx2`] on 64-byte
//! vectors. Q8_0/Q4_0/Q4_1 take two 32-element blocks per step (an odd last block
//! goes through 256-bit code); the K-quants take 64 elements (two sub-blocks) per
//! step. VNNI is not required (`maddubs` + `madd` as on AVX2). Float weights use the
//! AVX2 kernels (bandwidth bound).

use crate::activation::ActRow;
use crate::blocks::q4_k::unpack_scales;
use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn load256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn load512(p: *const u8) -> __m512i {
    _mm512_loadu_si512(p as *const _)
}

/// `[lo | hi]` as one 512-bit vector.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
}

/// 16 packed bytes -> 32 nibbles (low nibbles first), as in the AVX2 kernels.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn nibbles32(p: *const u8) -> __m256i {
    let q = _mm_loadu_si128(p as *const __m128i);
    let m4 = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(q, m4);
    let hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
    _mm256_set_m128i(hi, lo)
}

/// 8 lanes of `a`, then 8 lanes of `b` (one scale per 256-bit half).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn halves_ps(a: f32, b: f32) -> __m512 {
    _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b))
}

/// 16 i16 lanes of `a`, then 16 of `b`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn halves_epi16(a: i16, b: i16) -> __m512i {
    _mm512_mask_blend_epi16(0xFFFF_0000, _mm512_set1_epi16(a), _mm512_set1_epi16(b))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn dot_u8i8(u: __m512i, s: __m512i) -> __m512i {
    _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn dot_u8i8_256(u: __m256i, s: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
}

/// Σ w·a of signed bytes: |w| (unsigned) times a with w's sign.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn dot_i8i8(w: __m512i, a: __m512i) -> __m512i {
    let neg = _mm512_movepi8_mask(w);
    let sa = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
    dot_u8i8(_mm512_abs_epi8(w), sa)
}

/// Q8_0 weights x Act32.
///
/// # Safety
/// AVX-512 F/BW + AVX2/FMA/F16C; `w` whole Q8_0 blocks, `a` an `Act32` row of the same length.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot_q8_0(w: &[u8], a: &ActRow) -> f32 {
    let nb = w.len() / 34;
    debug_assert!(a.qs.len() >= nb * 32 && a.d.len() >= nb);
    let (wp, ap) = (w.as_ptr(), a.qs.as_ptr() as *const u8);
    let mut acc = _mm512_setzero_ps();
    let mut b = 0;
    while b + 2 <= nb {
        let (b0, b1) = (wp.add(34 * b), wp.add(34 * b + 34));
        let wq = join(load256(b0.add(2)), load256(b1.add(2)));
        let p = dot_i8i8(wq, load512(ap.add(32 * b)));
        let s = halves_ps(
            f16_at(b0) * *a.d.get_unchecked(b),
            f16_at(b1) * *a.d.get_unchecked(b + 1),
        );
        acc = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(p), acc);
        b += 2;
    }
    let mut sum = _mm512_reduce_add_ps(acc);
    if b < nb {
        let blk = wp.add(34 * b);
        let wq = load256(blk.add(2));
        let aq = load256(ap.add(32 * b));
        let p = dot_u8i8_256(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(aq, wq));
        sum += f16_at(blk) * *a.d.get_unchecked(b) * hsum_epi32_256(p) as f32;
    }
    sum
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn hsum_epi32_256(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// Shared body of Q4_0 / Q4_1: `(Σ d_w d_a Σ q·a, Σ c_w s_a)` where `c_w` is the
/// f16 at byte `extra` of the block (d for Q4_0, m for Q4_1).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn dot_q4_pair(w: &[u8], a: &ActRow, bb: usize, qoff: usize, extra: usize) -> (f32, f32) {
    let nb = w.len() / bb;
    debug_assert!(a.qs.len() >= nb * 32 && a.s.len() >= nb);
    let (wp, ap) = (w.as_ptr(), a.qs.as_ptr() as *const u8);
    let mut acc = _mm512_setzero_ps();
    let mut side = 0.0f32;
    let mut b = 0;
    while b + 2 <= nb {
        let (b0, b1) = (wp.add(bb * b), wp.add(bb * b + bb));
        let q = join(nibbles32(b0.add(qoff)), nibbles32(b1.add(qoff)));
        let p = dot_u8i8(q, load512(ap.add(32 * b)));
        let s = halves_ps(
            f16_at(b0) * *a.d.get_unchecked(b),
            f16_at(b1) * *a.d.get_unchecked(b + 1),
        );
        acc = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(p), acc);
        side += f16_at(b0.add(extra)) * *a.s.get_unchecked(b)
            + f16_at(b1.add(extra)) * *a.s.get_unchecked(b + 1);
        b += 2;
    }
    let mut sum = _mm512_reduce_add_ps(acc);
    if b < nb {
        let blk = wp.add(bb * b);
        let p = dot_u8i8_256(nibbles32(blk.add(qoff)), load256(ap.add(32 * b)));
        sum += f16_at(blk) * *a.d.get_unchecked(b) * hsum_epi32_256(p) as f32;
        side += f16_at(blk.add(extra)) * *a.s.get_unchecked(b);
    }
    (sum, side)
}

/// Q4_0 weights x Act32.
///
/// # Safety
/// As [`dot_q8_0`], for Q4_0 blocks.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot_q4_0(w: &[u8], a: &ActRow) -> f32 {
    let (sum, offs) = dot_q4_pair(w, a, 18, 2, 0);
    sum - 8.0 * offs
}

/// Q4_1 weights x Act32.
///
/// # Safety
/// As [`dot_q8_0`], for Q4_1 blocks.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot_q4_1(w: &[u8], a: &ActRow) -> f32 {
    let (sum, mins) = dot_q4_pair(w, a, 20, 4, 2);
    sum + mins
}

#[inline(always)]
fn min_sum(m: &[u8; 8], bs: &[i16]) -> i32 {
    (0..8)
        .map(|j| m[j] as i32 * (bs[2 * j] as i32 + bs[2 * j + 1] as i32))
        .sum()
}

/// Shared body of Q4_K / Q5_K; `high` is true for Q5_K (qh at byte 16, qs at 48).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn dot_k45(w: &[u8], a: &ActRow, high: bool) -> f32 {
    let bb = if high { 176 } else { 144 };
    let qoff = if high { 48 } else { 16 };
    let nb = w.len() / bb;
    debug_assert!(a.qs.len() >= nb * 256 && a.bsums.len() >= nb * 16);
    let (wp, ap) = (w.as_ptr(), a.qs.as_ptr() as *const u8);
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let mut acc = _mm512_setzero_ps();
    let mut mins = 0.0f32;
    for b in 0..nb {
        let blk = wp.add(bb * b);
        let da = *a.d.get_unchecked(b);
        let (sc, m) = unpack_scales(std::slice::from_raw_parts(blk.add(4), 12));
        mins += da
            * f16_at(blk.add(2))
            * min_sum(&m, a.bsums.get_unchecked(16 * b..16 * b + 16)) as f32;
        let qa = ap.add(256 * b);
        let mut qh = if high {
            load256(blk.add(16))
        } else {
            _mm256_setzero_si256()
        };
        let mut isum = _mm512_setzero_si512();
        for c in 0..4 {
            let q = load256(blk.add(qoff + 32 * c));
            let mut lo = _mm256_and_si256(q, m4);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if high {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
                qh = _mm256_srli_epi16(qh, 1);
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
                qh = _mm256_srli_epi16(qh, 1);
            }
            let p = _mm512_maddubs_epi16(join(lo, hi), load512(qa.add(64 * c)));
            let s = halves_epi16(sc[2 * c] as i16, sc[2 * c + 1] as i16);
            isum = _mm512_add_epi32(isum, _mm512_madd_epi16(p, s));
        }
        let scale = _mm512_set1_ps(da * f16_at(blk));
        acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(isum), acc);
    }
    _mm512_reduce_add_ps(acc) - mins
}

/// Q4_K weights x Act256.
///
/// # Safety
/// AVX-512 F/BW + AVX2/FMA/F16C; `w` whole Q4_K blocks, `a` an `Act256` row of the same length.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot_q4_k(w: &[u8], a: &ActRow) -> f32 {
    dot_k45(w, a, false)
}

/// Q5_K weights x Act256.
///
/// # Safety
/// As [`dot_q4_k`], for Q5_K blocks.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot_q5_k(w: &[u8], a: &ActRow) -> f32 {
    dot_k45(w, a, true)
}

/// Q6_K weights x Act256.
///
/// # Safety
/// As [`dot_q4_k`], for Q6_K blocks.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot_q6_k(w: &[u8], a: &ActRow) -> f32 {
    let nb = w.len() / 210;
    debug_assert!(a.qs.len() >= nb * 256 && a.bsums.len() >= nb * 16);
    let (wp, ap) = (w.as_ptr(), a.qs.as_ptr() as *const u8);
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(0x03);
    // i16 lane j of a scale vector takes scale j / 8 of 4 consecutive scales.
    let spread = _mm512_setr_epi32(
        0, 0, 0, 0, 0x10001, 0x10001, 0x10001, 0x10001, 0x20002, 0x20002, 0x20002, 0x20002,
        0x30003, 0x30003, 0x30003, 0x30003,
    );
    let mut sum = 0.0f32;
    for b in 0..nb {
        let blk = wp.add(210 * b);
        let sc = std::slice::from_raw_parts(blk.add(192) as *const i8, 16);
        let bs = a.bsums.get_unchecked(16 * b..16 * b + 16);
        let offs: i32 = (0..16).map(|g| sc[g] as i32 * bs[g] as i32).sum::<i32>() * 32;
        let qa = ap.add(256 * b);
        let mut isum = _mm512_setzero_si512();
        for n in 0..2 {
            let ql0 = load256(blk.add(64 * n));
            let ql1 = load256(blk.add(64 * n + 32));
            let qh = load256(blk.add(128 + 32 * n));
            let h = |v: __m256i| _mm256_slli_epi16(_mm256_and_si256(v, m2), 4);
            let q1 = _mm256_or_si256(_mm256_and_si256(ql0, m4), h(qh));
            let q2 = _mm256_or_si256(_mm256_and_si256(ql1, m4), h(_mm256_srli_epi16(qh, 2)));
            let q3 = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                h(_mm256_srli_epi16(qh, 4)),
            );
            let q4 = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                h(_mm256_srli_epi16(qh, 6)),
            );
            for (k, q) in [join(q1, q2), join(q3, q4)].into_iter().enumerate() {
                let g = 8 * n + 4 * k;
                let s4 = std::ptr::read_unaligned(blk.add(192 + g) as *const i32);
                let s = _mm512_permutexvar_epi16(
                    spread,
                    _mm512_castsi128_si512(_mm_cvtepi8_epi16(_mm_cvtsi32_si128(s4))),
                );
                let p = _mm512_maddubs_epi16(q, load512(qa.add(128 * n + 64 * k)));
                isum = _mm512_add_epi32(isum, _mm512_madd_epi16(p, s));
            }
        }
        let total = _mm512_reduce_add_epi32(isum) - offs;
        let scale = *a.d.get_unchecked(b) * f16_at(blk.add(208));
        sum += scale * total as f32;
    }
    sum
}
