//! AVX2 + FMA f32 micro-kernel of the GEMM path ([`crate::tile_gemm`]): `M` (1..=6)
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
