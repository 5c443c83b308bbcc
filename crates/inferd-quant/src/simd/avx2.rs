//! AVX2 + FMA + F16C dot products of one weight row with one activation row.
//!
//! Integer kernels: weights are unpacked to unsigned bytes (4/5/6-bit levels) or kept
//! signed (Q8_0, via the sign trick), multiplied with the i8 activations by
//! `_mm256_maddubs_epi16` (u8 x i8 -> pairwise i16; the largest pair sum, 2*63*127 or
//! 2*128*127, cannot saturate) and widened by `_mm256_madd_epi16`, which also applies
//! the K-quant sub-block scales. Offsets (Q4_0's -8, Q6_K's -32) and minimums
//! (Q4_1, Q4_K, Q5_K) are folded in once per block from the activation sums.

use crate::activation::ActRow;
use crate::blocks::q4_k::unpack_scales;
use std::arch::x86_64::*;

/// f16 bits at `p` (unaligned) as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn load256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// 16 packed bytes -> 32 nibbles: low nibbles in the low 128 bits, high nibbles above.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles32(p: *const u8) -> __m256i {
    let q = _mm_loadu_si128(p as *const __m128i);
    let m4 = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(q, m4);
    let hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
    _mm256_set_m128i(hi, lo)
}

/// Σ u·s over 32 byte pairs, as 8 i32 partial sums (`u` unsigned, `s` signed).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_u8i8(u: __m256i, s: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
}

/// Q8_0 weights x Act32.
///
/// # Safety
/// AVX2/FMA/F16C; `w` whole Q8_0 blocks and `a` an `Act32` row of the same length.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q8_0(w: &[u8], a: &ActRow) -> f32 {
    let nb = w.len() / 34;
    debug_assert!(a.qs.len() >= nb * 32 && a.d.len() >= nb);
    let (wp, ap) = (w.as_ptr(), a.qs.as_ptr() as *const u8);
    let step = |acc: __m256, b: usize| {
        let blk = wp.add(34 * b);
        let wq = load256(blk.add(2));
        let aq = load256(ap.add(32 * b));
        // |w| * (a * sign(w)) == w * a, with |w| read as unsigned.
        let p = dot_u8i8(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(aq, wq));
        let scale = _mm256_set1_ps(f16_at(blk) * *a.d.get_unchecked(b));
        _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(p), acc)
    };
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut b = 0;
    while b + 2 <= nb {
        acc0 = step(acc0, b);
        acc1 = step(acc1, b + 1);
        b += 2;
    }
    if b < nb {
        acc0 = step(acc0, b);
    }
    hsum_ps(_mm256_add_ps(acc0, acc1))
}

/// Shared body of Q4_0 / Q4_1 (block `bb` bytes, nibbles at `qoff`):
/// returns `(Σ d_w d_a Σ q·a, Σ c_w s_a)` with `c_w` the f16 at byte `extra` of the block.
#[inline(always)]
unsafe fn dot_q4_pair(w: &[u8], a: &ActRow, bb: usize, qoff: usize, extra: usize) -> (f32, f32) {
    let nb = w.len() / bb;
    debug_assert!(a.qs.len() >= nb * 32 && a.s.len() >= nb);
    let (wp, ap) = (w.as_ptr(), a.qs.as_ptr() as *const u8);
    let step = |acc: __m256, b: usize| {
        let blk = wp.add(bb * b);
        let p = dot_u8i8(nibbles32(blk.add(qoff)), load256(ap.add(32 * b)));
        let scale = _mm256_set1_ps(f16_at(blk) * *a.d.get_unchecked(b));
        let side = f16_at(blk.add(extra)) * *a.s.get_unchecked(b);
        (_mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(p), acc), side)
    };
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let (mut side0, mut side1) = (0.0f32, 0.0f32);
    let mut b = 0;
    while b + 2 <= nb {
        let (a0, s0) = step(acc0, b);
        let (a1, s1) = step(acc1, b + 1);
        (acc0, acc1) = (a0, a1);
        side0 += s0;
        side1 += s1;
        b += 2;
    }
    if b < nb {
        let (a0, s0) = step(acc0, b);
        acc0 = a0;
        side0 += s0;
    }
    (hsum_ps(_mm256_add_ps(acc0, acc1)), side0 + side1)
}

/// Q4_0 weights x Act32: `Σ d_w (d_a Σ q·a - 8 s_a)`.
///
/// # Safety
/// As [`dot_q8_0`], for Q4_0 blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_0(w: &[u8], a: &ActRow) -> f32 {
    let (sum, offs) = dot_q4_pair(w, a, 18, 2, 0);
    sum - 8.0 * offs
}

/// Q4_1 weights x Act32: `Σ d_w d_a Σ q·a + m_w s_a`.
///
/// # Safety
/// As [`dot_q8_0`], for Q4_1 blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_1(w: &[u8], a: &ActRow) -> f32 {
    let (sum, mins) = dot_q4_pair(w, a, 20, 4, 2);
    sum + mins
}

/// Σ_j m_j * (bsum_{2j} + bsum_{2j+1}) for the 8 sub-block minimums of a K-quant block.
#[inline(always)]
fn min_sum(m: &[u8; 8], bs: &[i16]) -> i32 {
    (0..8)
        .map(|j| m[j] as i32 * (bs[2 * j] as i32 + bs[2 * j + 1] as i32))
        .sum()
}

/// Q4_K weights x Act256.
///
/// # Safety
/// AVX2/FMA/F16C; `w` whole Q4_K blocks and `a` an `Act256` row of the same length.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_k(w: &[u8], a: &ActRow) -> f32 {
    let nb = w.len() / 144;
    debug_assert!(a.qs.len() >= nb * 256 && a.bsums.len() >= nb * 16);
    let (wp, ap) = (w.as_ptr(), a.qs.as_ptr() as *const u8);
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = _mm256_setzero_ps();
    let mut mins = 0.0f32;
    for b in 0..nb {
        let blk = wp.add(144 * b);
        let da = *a.d.get_unchecked(b);
        let (sc, m) = unpack_scales(std::slice::from_raw_parts(blk.add(4), 12));
        mins += da
            * f16_at(blk.add(2))
            * min_sum(&m, a.bsums.get_unchecked(16 * b..16 * b + 16)) as f32;
        let qa = ap.add(256 * b);
        let mut isum = _mm256_setzero_si256();
        for c in 0..4 {
            let q = load256(blk.add(16 + 32 * c));
            let lo = _mm256_and_si256(q, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            let plo = _mm256_maddubs_epi16(lo, load256(qa.add(64 * c)));
            let phi = _mm256_maddubs_epi16(hi, load256(qa.add(64 * c + 32)));
            let slo = _mm256_set1_epi16(sc[2 * c] as i16);
            let shi = _mm256_set1_epi16(sc[2 * c + 1] as i16);
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(plo, slo));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(phi, shi));
        }
        let scale = _mm256_set1_ps(da * f16_at(blk));
        acc = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum), acc);
    }
    hsum_ps(acc) - mins
}

/// Q5_K weights x Act256.
///
/// # Safety
/// As [`dot_q4_k`], for Q5_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_k(w: &[u8], a: &ActRow) -> f32 {
    let nb = w.len() / 176;
    debug_assert!(a.qs.len() >= nb * 256 && a.bsums.len() >= nb * 16);
    let (wp, ap) = (w.as_ptr(), a.qs.as_ptr() as *const u8);
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    let mut mins = 0.0f32;
    for b in 0..nb {
        let blk = wp.add(176 * b);
        let da = *a.d.get_unchecked(b);
        let (sc, m) = unpack_scales(std::slice::from_raw_parts(blk.add(4), 12));
        mins += da
            * f16_at(blk.add(2))
            * min_sum(&m, a.bsums.get_unchecked(16 * b..16 * b + 16)) as f32;
        let qa = ap.add(256 * b);
        // Bit k of each qh byte is the 5th bit of sub-block k; shift it down to bit 0
        // one sub-block at a time (16-bit shifts only pollute bits we never read).
        let mut qh = load256(blk.add(16));
        let mut isum = _mm256_setzero_si256();
        for c in 0..4 {
            let q = load256(blk.add(48 + 32 * c));
            let h_lo = _mm256_slli_epi16(_mm256_and_si256(qh, one), 4);
            qh = _mm256_srli_epi16(qh, 1);
            let h_hi = _mm256_slli_epi16(_mm256_and_si256(qh, one), 4);
            qh = _mm256_srli_epi16(qh, 1);
            let lo = _mm256_or_si256(_mm256_and_si256(q, m4), h_lo);
            let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h_hi);
            let plo = _mm256_maddubs_epi16(lo, load256(qa.add(64 * c)));
            let phi = _mm256_maddubs_epi16(hi, load256(qa.add(64 * c + 32)));
            let slo = _mm256_set1_epi16(sc[2 * c] as i16);
            let shi = _mm256_set1_epi16(sc[2 * c + 1] as i16);
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(plo, slo));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(phi, shi));
        }
        let scale = _mm256_set1_ps(da * f16_at(blk));
        acc = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum), acc);
    }
    hsum_ps(acc) - mins
}

/// Q6_K weights x Act256.
///
/// # Safety
/// As [`dot_q4_k`], for Q6_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q6_k(w: &[u8], a: &ActRow) -> f32 {
    let nb = w.len() / 210;
    debug_assert!(a.qs.len() >= nb * 256 && a.bsums.len() >= nb * 16);
    let (wp, ap) = (w.as_ptr(), a.qs.as_ptr() as *const u8);
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(0x03);
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let blk = wp.add(210 * b);
        let sc = std::slice::from_raw_parts(blk.add(192) as *const i8, 16);
        let bs = a.bsums.get_unchecked(16 * b..16 * b + 16);
        // The -32 offset: Σ_g sc_g * 32 * bsum_g.
        let offs: i32 = (0..16).map(|g| sc[g] as i32 * bs[g] as i32).sum::<i32>() * 32;
        let qa = ap.add(256 * b);
        let mut isum = _mm256_setzero_si256();
        for n in 0..2 {
            let ql0 = load256(blk.add(64 * n));
            let ql1 = load256(blk.add(64 * n + 32));
            let qh = load256(blk.add(128 + 32 * n));
            let hbits = |shift: i32| -> __m256i {
                let h = match shift {
                    0 => qh,
                    2 => _mm256_srli_epi16(qh, 2),
                    4 => _mm256_srli_epi16(qh, 4),
                    _ => _mm256_srli_epi16(qh, 6),
                };
                _mm256_slli_epi16(_mm256_and_si256(h, m2), 4)
            };
            let q = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), hbits(0)),
                _mm256_or_si256(_mm256_and_si256(ql1, m4), hbits(2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), hbits(4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), hbits(6)),
            ];
            for (t, qt) in q.iter().enumerate() {
                let g = 8 * n + 2 * t;
                let p = _mm256_maddubs_epi16(*qt, load256(qa.add(128 * n + 32 * t)));
                let s = _mm256_set_m128i(
                    _mm_set1_epi16(sc[g + 1] as i16),
                    _mm_set1_epi16(sc[g] as i16),
                );
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, s));
            }
        }
        let scale = *a.d.get_unchecked(b) * f16_at(blk.add(208));
        let isum = _mm256_sub_epi32(isum, _mm256_setr_epi32(offs, 0, 0, 0, 0, 0, 0, 0));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(isum), acc);
    }
    hsum_ps(acc)
}

/// F32 weights x f32 activations.
///
/// # Safety
/// AVX2/FMA/F16C; `w.len() >= 4 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f32(w: &[u8], a: &ActRow) -> f32 {
    dot_float(
        w.as_ptr(),
        a.x,
        4,
        |p| _mm256_loadu_ps(p as *const f32),
        |p| f32::from_le_bytes([*p, *p.add(1), *p.add(2), *p.add(3)]),
    )
}

/// F16 weights x f32 activations.
///
/// # Safety
/// AVX2/FMA/F16C; `w.len() >= 2 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f16(w: &[u8], a: &ActRow) -> f32 {
    dot_float(
        w.as_ptr(),
        a.x,
        2,
        |p| _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
        |p| f16_at(p),
    )
}

/// BF16 weights x f32 activations.
///
/// # Safety
/// AVX2/FMA/F16C; `w.len() >= 2 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_bf16(w: &[u8], a: &ActRow) -> f32 {
    dot_float(
        w.as_ptr(),
        a.x,
        2,
        |p| {
            let v = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
            _mm256_castsi256_ps(_mm256_slli_epi32(v, 16))
        },
        |p| f32::from_bits((u16::from_le_bytes([*p, *p.add(1)]) as u32) << 16),
    )
}

/// Shared body of the float dots: `load8` widens 8 weights at a byte pointer,
/// `load1` one weight; `esize` bytes per weight. Four accumulators hide FMA latency.
#[inline(always)]
unsafe fn dot_float(
    wp: *const u8,
    x: &[f32],
    esize: usize,
    load8: impl Fn(*const u8) -> __m256,
    load1: impl Fn(*const u8) -> f32,
) -> f32 {
    let k = x.len();
    let xp = x.as_ptr();
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= k {
        for (u, a) in acc.iter_mut().enumerate() {
            let j = i + 8 * u;
            *a = _mm256_fmadd_ps(load8(wp.add(j * esize)), _mm256_loadu_ps(xp.add(j)), *a);
        }
        i += 32;
    }
    while i + 8 <= k {
        acc[0] = _mm256_fmadd_ps(load8(wp.add(i * esize)), _mm256_loadu_ps(xp.add(i)), acc[0]);
        i += 8;
    }
    let mut sum = hsum_ps(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    while i < k {
        sum += load1(wp.add(i * esize)) * x[i];
        i += 1;
    }
    sum
}

/// Q5_0 weights x Act32: `Σ d_w (d_a Σ q·a - 16 s_a)`. The 32 high bits are spread
/// to bytes by a byte shuffle (byte i takes qh byte i/8) and a per-byte bit test.
///
/// # Safety
/// AVX2/FMA/F16C; `w` whole Q5_0 blocks and `a` an `Act32` row of the same length.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_0(w: &[u8], a: &ActRow) -> f32 {
    let nb = w.len() / 22;
    debug_assert!(a.qs.len() >= nb * 32 && a.s.len() >= nb);
    let (wp, ap) = (w.as_ptr(), a.qs.as_ptr() as *const u8);
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let sixteen = _mm256_set1_epi8(16);
    // One block: (acc + d_w d_a Σ q·a, d_w s_a). Two independent chains hide FMA latency.
    let step = |acc: __m256, b: usize| {
        let blk = wp.add(22 * b);
        let qh = std::ptr::read_unaligned(blk.add(2) as *const i32);
        let hb = _mm256_shuffle_epi8(_mm256_set1_epi32(qh), spread);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit);
        let q = _mm256_or_si256(nibbles32(blk.add(6)), _mm256_and_si256(set, sixteen));
        let p = dot_u8i8(q, load256(ap.add(32 * b)));
        let dw = f16_at(blk);
        let scale = _mm256_set1_ps(dw * *a.d.get_unchecked(b));
        (
            _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(p), acc),
            dw * *a.s.get_unchecked(b),
        )
    };
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let (mut offs0, mut offs1) = (0.0f32, 0.0f32);
    let mut b = 0;
    while b + 2 <= nb {
        let (a0, o0) = step(acc0, b);
        let (a1, o1) = step(acc1, b + 1);
        (acc0, acc1) = (a0, a1);
        offs0 += o0;
        offs1 += o1;
        b += 2;
    }
    if b < nb {
        let (a0, o0) = step(acc0, b);
        acc0 = a0;
        offs0 += o0;
    }
    hsum_ps(_mm256_add_ps(acc0, acc1)) - 16.0 * (offs0 + offs1)
}
