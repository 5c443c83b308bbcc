//! AVX2 + FMA f32 micro-kernel of the GEMM path (`tile_gemm`): `M` (1..=6)
//! activation rows times one packed panel of 16 weight rows.
//!
//! Every output is one FMA chain over `k` in increasing order
//! (`acc = fma(x[k], w[k], acc)`, continued from the stored partial sum for later
//! k-blocks), so its bits do not depend on `M`, on the panel or on the blocking; the
//! portable kernel computes the same chain with `f32::mul_add`.

use std::arch::x86_64::*;

/// `c[i][0..16] (+)= Σ_k a[i][k] · b[k][0..16]` for `i < M`.
///
/// * `a`: row `i` at `a + i * lda`, `k` elements each (activations, row-major).
/// * `b`: packed panel, `[k, 16]`.
/// * `c`: row `i` at `c + i * ldc`, 16 elements each; read (chain continued) unless `first`.
///
/// # Safety
/// AVX2 and FMA are available; the pointers cover the ranges above.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn micro<const M: usize>(
    k: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    first: bool,
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; M];
    if !first {
        for (i, r) in acc.iter_mut().enumerate() {
            r[0] = _mm256_loadu_ps(c.add(i * ldc));
            r[1] = _mm256_loadu_ps(c.add(i * ldc + 8));
        }
    }
    let mut rows = [a; M];
    for (i, r) in rows.iter_mut().enumerate() {
        *r = a.add(i * lda);
    }
    let mut b = b;
    for kk in 0..k {
        let b0 = _mm256_loadu_ps(b);
        let b1 = _mm256_loadu_ps(b.add(8));
        for i in 0..M {
            let av = _mm256_broadcast_ss(&*rows[i].add(kk));
            acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
        }
        b = b.add(16);
    }
    for (i, r) in acc.iter().enumerate() {
        _mm256_storeu_ps(c.add(i * ldc), r[0]);
        _mm256_storeu_ps(c.add(i * ldc + 8), r[1]);
    }
}

/// Transpose `t` ([16, stride], the first `ch` columns of each row; `ch` a multiple
/// of 8) into `out` ([ch, 16]) by 8x8 register transposes.
///
/// # Safety
/// AVX2 is available; `t` holds `15 * stride + ch` and `out` `16 * ch` elements.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn transpose16(t: *const f32, stride: usize, ch: usize, out: *mut f32) {
    for k in (0..ch).step_by(8) {
        for h in 0..2 {
            let src = t.add(8 * h * stride + k);
            let r: [__m256; 8] = std::array::from_fn(|j| _mm256_loadu_ps(src.add(j * stride)));
            let t0 = _mm256_unpacklo_ps(r[0], r[1]);
            let t1 = _mm256_unpackhi_ps(r[0], r[1]);
            let t2 = _mm256_unpacklo_ps(r[2], r[3]);
            let t3 = _mm256_unpackhi_ps(r[2], r[3]);
            let t4 = _mm256_unpacklo_ps(r[4], r[5]);
            let t5 = _mm256_unpackhi_ps(r[4], r[5]);
            let t6 = _mm256_unpacklo_ps(r[6], r[7]);
            let t7 = _mm256_unpackhi_ps(r[6], r[7]);
            let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let o = [
                _mm256_permute2f128_ps::<0x20>(s0, s4),
                _mm256_permute2f128_ps::<0x20>(s1, s5),
                _mm256_permute2f128_ps::<0x20>(s2, s6),
                _mm256_permute2f128_ps::<0x20>(s3, s7),
                _mm256_permute2f128_ps::<0x31>(s0, s4),
                _mm256_permute2f128_ps::<0x31>(s1, s5),
                _mm256_permute2f128_ps::<0x31>(s2, s6),
                _mm256_permute2f128_ps::<0x31>(s3, s7),
            ];
            for (j, v) in o.iter().enumerate() {
                _mm256_storeu_ps(out.add((k + j) * 16 + 8 * h), *v);
            }
        }
    }
}
