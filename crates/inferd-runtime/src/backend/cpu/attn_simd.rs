//! The CPU attention's vector kernels ([`super::attention`]): scores of (query row, key
//! row) pairs, a base-2 exponential, and a weighted sum of V rows.
//!
//! Each value is one fixed sequence of IEEE operations whichever way it is computed: the
//! AVX2 kernels, the plain ones (no AVX2, or `INFERD_SIMD=scalar`) and any arrangement of
//! pairs in a call give the same bits (the tests check it). That is what keeps a query
//! row's attention independent of its tile, batch and thread count.
//! - A score ([`dot`]): lane i of 8 sums `q[c + i]·k[c + i]` over the 8-wide chunks c in
//!   order by fused multiply-adds, the lanes then add as ((0+1)+(2+3))+((4+5)+(6+7)), and
//!   a scalar fused chain over the last `d % 8` elements is added last.
//! - [`exp2`]: 2^x for x ≤ 0 by a degree-6 polynomial on the fraction (relative error
//!   under 3e-7), 0 below -125; NaN stays NaN.
//! - [`axpy_rows`]: `y[e] = fma(w[s], x[s][e], y[e])` for s in order, per element.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Lanes of a vector (AVX2, f32).
const L: usize = 8;

/// 2^f for f in [-0.5, 0.5]: the polynomial's coefficients, highest degree first.
const EXP2_POLY: [f32; 7] = [
    1.535_336_2e-4,
    1.339_887_4e-3,
    9.618_438e-3,
    5.550_332_5e-2,
    2.402_264_8e-1,
    6.931_472e-1,
    1.0,
];
/// Below this, 2^x is taken as 0 (the scale by 2^n then stays a normal number).
const EXP2_MIN: f32 = -125.0;

/// The lanes' sum, in the kernels' tree order.
#[inline(always)]
fn tree(a: [f32; L]) -> f32 {
    ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}

/// `q · k` as every kernel here computes it (see the module's note).
#[inline(always)]
pub fn dot(q: &[f32], k: &[f32]) -> f32 {
    let d = q.len();
    let full = d / L * L;
    let mut acc = [0f32; L];
    for c in (0..full).step_by(L) {
        for i in 0..L {
            acc[i] = q[c + i].mul_add(k[c + i], acc[i]);
        }
    }
    let mut tail = 0f32;
    for e in full..d {
        tail = q[e].mul_add(k[e], tail);
    }
    tree(acc) + tail
}

/// 2^x as every kernel here computes it (x ≤ 0 in attention: a score minus its maximum).
#[inline(always)]
pub fn exp2(x: f32) -> f32 {
    if x < EXP2_MIN {
        return 0.0;
    }
    let n = x.round_ties_even();
    let f = x - n;
    let mut p = EXP2_POLY[0];
    for &c in &EXP2_POLY[1..] {
        p = p.mul_add(f, c);
    }
    // NaN converts to i32::MIN here and to 0 as `as` casts: p is NaN either way.
    let n = if n.is_nan() { 0 } else { n as i32 };
    f32::from_bits(p.to_bits().wrapping_add((n << 23) as u32))
}

/// `y[e] = fma(w[s], x[s·d + e], y[e])` for s = 0, 1, .. in order; x: [w.len(), d = y.len()].
#[inline(always)]
pub fn axpy_rows(y: &mut [f32], w: &[f32], x: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx2() && y.len().is_multiple_of(L) {
        // SAFETY: AVX2 and FMA are there (checked at run time); x holds w.len() rows of y.len().
        return unsafe { axpy_rows_avx2(y, w, x) };
    }
    let d = y.len();
    for (s, &ws) in w.iter().enumerate() {
        for (ye, &xe) in y.iter_mut().zip(&x[s * d..(s + 1) * d]) {
            *ye = ws.mul_add(xe, *ye);
        }
    }
}

/// Scores of 8 pairs: `out[r·K + j] = dot(q[r], k[j])` (R·K = 8 pairs: the rows' K rows
/// are loaded once for all of them). Every slice is `d` long.
#[inline(always)]
pub fn dots<const R: usize, const K: usize>(q: [&[f32]; R], k: [&[f32]; K]) -> [f32; L] {
    debug_assert_eq!(R * K, L);
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx2() {
        // SAFETY: AVX2 and FMA are there (checked at run time); every slice has the same length.
        return unsafe { dots_avx2(q, k) };
    }
    std::array::from_fn(|p| dot(q[p / K], k[p % K]))
}

/// `exp2` of each of `x`, in place.
#[inline(always)]
pub fn exp2_all(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx2() {
        // SAFETY: AVX2 and FMA are there (checked at run time).
        return unsafe { exp2_all_avx2(x) };
    }
    for v in x {
        *v = exp2(*v);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_avx2<const R: usize, const K: usize>(q: [&[f32]; R], k: [&[f32]; K]) -> [f32; L] {
    let d = q[0].len();
    let full = d / L * L;
    let mut acc = [_mm256_setzero_ps(); L];
    let mut c = 0;
    while c < full {
        let kv: [__m256; K] = std::array::from_fn(|j| _mm256_loadu_ps(k[j].as_ptr().add(c)));
        for r in 0..R {
            let qv = _mm256_loadu_ps(q[r].as_ptr().add(c));
            for j in 0..K {
                acc[r * K + j] = _mm256_fmadd_ps(qv, kv[j], acc[r * K + j]);
            }
        }
        c += L;
    }
    // The tree of every accumulator at once: two rounds of pairwise adds within 128-bit
    // halves, then the halves ((0+1)+(2+3)) + ((4+5)+(6+7)).
    let h01 = _mm256_hadd_ps(acc[0], acc[1]);
    let h23 = _mm256_hadd_ps(acc[2], acc[3]);
    let h45 = _mm256_hadd_ps(acc[4], acc[5]);
    let h67 = _mm256_hadd_ps(acc[6], acc[7]);
    let h0123 = _mm256_hadd_ps(h01, h23);
    let h4567 = _mm256_hadd_ps(h45, h67);
    let lo = _mm256_permute2f128_ps(h0123, h4567, 0x20);
    let hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
    let mut out = [0f32; L];
    _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(lo, hi));
    // Lane p of lo + hi is accumulator p's tree; then its tail, as `dot` adds it.
    for (p, o) in out.iter_mut().enumerate() {
        let (qr, kr) = (q[p / K], k[p % K]);
        let mut tail = 0f32;
        for e in full..d {
            tail = qr[e].mul_add(kr[e], tail);
        }
        *o += tail;
    }
    out
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp2_all_avx2(x: &mut [f32]) {
    let mut chunks = x.chunks_exact_mut(L);
    for c in &mut chunks {
        let v = _mm256_loadu_ps(c.as_ptr());
        _mm256_storeu_ps(c.as_mut_ptr(), exp2_avx2(v));
    }
    for v in chunks.into_remainder() {
        *v = exp2(*v);
    }
}

/// [`exp2`] of 8 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp2_avx2(x: __m256) -> __m256 {
    let n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    let f = _mm256_sub_ps(x, n);
    let mut p = _mm256_set1_ps(EXP2_POLY[0]);
    for &c in &EXP2_POLY[1..] {
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c));
    }
    // NaN lanes: cvtps gives i32::MIN, whose shift is 0; p is NaN there anyway.
    let e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    let r = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
    // x < EXP2_MIN (ordered: NaN is kept) -> 0
    let low = _mm256_cmp_ps(x, _mm256_set1_ps(EXP2_MIN), _CMP_LT_OQ);
    _mm256_andnot_ps(low, r)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_rows_avx2(y: &mut [f32], w: &[f32], x: &[f32]) {
    let d = y.len();
    let mut c = 0;
    // 64 lanes at a time: eight independent accumulation chains in registers.
    while c + 8 * L <= d {
        let mut acc: [__m256; 8] =
            std::array::from_fn(|i| _mm256_loadu_ps(y.as_ptr().add(c + i * L)));
        for (s, &ws) in w.iter().enumerate() {
            let wv = _mm256_set1_ps(ws);
            let row = x.as_ptr().add(s * d + c);
            for (i, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(row.add(i * L)), *a);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(y.as_mut_ptr().add(c + i * L), *a);
        }
        c += 8 * L;
    }
    while c < d {
        let mut acc = _mm256_loadu_ps(y.as_ptr().add(c));
        for (s, &ws) in w.iter().enumerate() {
            acc = _mm256_fmadd_ps(
                _mm256_set1_ps(ws),
                _mm256_loadu_ps(x.as_ptr().add(s * d + c)),
                acc,
            );
        }
        _mm256_storeu_ps(y.as_mut_ptr().add(c), acc);
        c += L;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(n: usize, k: f32) -> Vec<f32> {
        (0..n).map(|i| ((i as f32 + 1.0) * k).sin() * 3.0).collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn dot_is_close_to_f64() {
        for d in [1usize, 7, 8, 16, 64, 70, 128] {
            let (a, b) = (vals(d, 0.37), vals(d, 0.11));
            let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            assert!((dot(&a, &b) as f64 - want).abs() < 1e-4, "d={d}");
        }
    }

    /// Every arrangement of pairs gives each pair `dot`'s bits, with AVX2 or without.
    #[test]
    fn dots_are_dot_bit_for_bit() {
        for d in [1usize, 5, 8, 16, 24, 64, 72, 128] {
            let (q, k) = (vals(8 * d, 0.37), vals(8 * d, 0.11));
            let (q, k) = (&q[..], &k[..]);
            let row = |v: &'_ [f32], i: usize| v[i * d..(i + 1) * d].to_vec();
            let (qs, ks): (Vec<Vec<f32>>, Vec<Vec<f32>>) = (
                (0..8).map(|i| row(q, i)).collect(),
                (0..8).map(|i| row(k, i)).collect(),
            );
            let want = |r: usize, j: usize| dot(&qs[r], &ks[j]).to_bits();
            let keys8: [&[f32]; 8] = std::array::from_fn(|j| &ks[j][..]);
            let keys4: [&[f32]; 4] = std::array::from_fn(|j| &ks[j][..]);
            let a = dots::<2, 4>([&qs[0], &qs[1]], keys4);
            let b = dots::<1, 8>([&qs[3]], keys8);
            for p in 0..8 {
                assert_eq!(a[p].to_bits(), want(p / 4, p % 4), "d={d} 2x4 pair {p}");
                assert_eq!(b[p].to_bits(), want(3, p), "d={d} 1x8 pair {p}");
            }
        }
    }

    #[test]
    fn exp2_is_close_and_the_same_in_every_lane() {
        let xs: Vec<f32> = (0..4000)
            .map(|i| -(i as f32) * 0.0317)
            .chain([
                0.0,
                -0.5,
                -1.0,
                -124.9,
                -125.0,
                -125.1,
                -1e9,
                f32::NEG_INFINITY,
            ])
            .collect();
        let mut got = xs.clone();
        exp2_all(&mut got);
        for (&x, &g) in xs.iter().zip(&got) {
            assert_eq!(g.to_bits(), exp2(x).to_bits(), "x={x}");
            let want = (x as f64).exp2();
            if x < EXP2_MIN {
                assert_eq!(g, 0.0, "x={x}");
            } else {
                assert!(
                    ((g as f64 - want) / want).abs() < 3e-7,
                    "x={x}: {g} vs {want}"
                );
            }
        }
        assert!(exp2(f32::NAN).is_nan());
        let mut nan = [f32::NAN; 9];
        exp2_all(&mut nan);
        assert!(nan.iter().all(|v| v.is_nan()));
    }

    #[test]
    fn axpy_rows_is_one_fused_chain_per_element() {
        for d in [8usize, 16, 64, 72, 128, 7] {
            for rows in [0usize, 1, 5, 16] {
                let w = vals(rows, 0.7);
                let x = vals(rows * d, 0.13);
                let mut want = vals(d, 0.29);
                let mut got = want.clone();
                for (s, &ws) in w.iter().enumerate() {
                    for e in 0..d {
                        want[e] = ws.mul_add(x[s * d + e], want[e]);
                    }
                }
                axpy_rows(&mut got, &w, &x);
                assert_eq!(bits(&got), bits(&want), "d={d} rows={rows}");
            }
        }
    }
}
