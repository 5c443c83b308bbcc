//! Small f32 vector kernels for the CPU ops that are not weight matmuls
//! (norms, the delta rule). Written as 8-lane array code that LLVM turns into one
//! vector instruction per line; [`with_avx2`] re-compiles a body with AVX2+FMA
//! enabled when the CPU has it (runtime dispatch, no global target flags).

/// `Σ a[i]·b[i]`.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = 0f32;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += x * y;
    }
    let a4 = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    s + (a4[0] + a4[2]) + (a4[1] + a4[3])
}

/// `y += a·x`.
#[inline(always)]
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// `Σ x[i]²`.
#[inline(always)]
pub fn sum_sq(x: &[f32]) -> f32 {
    dot(x, x)
}

/// Whether the running CPU has AVX2 and FMA (checked once).
pub fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            let forced_scalar = std::env::var("INFERD_SIMD").is_ok_and(|v| v == "scalar");
            !forced_scalar && is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Runs `f` compiled with AVX2+FMA enabled when available, else as is.
/// `f` should be `#[inline(always)]` code so that it is re-compiled in place.
#[inline(always)]
pub fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        if has_avx2() {
            // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
            return unsafe { avx2(f) };
        }
    }
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_f64() {
        for n in [0usize, 1, 7, 8, 9, 64, 130] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            let got = with_avx2(|| dot(&a, &b));
            assert!((got as f64 - want).abs() < 1e-4, "n={n}: {got} vs {want}");
        }
    }
}
