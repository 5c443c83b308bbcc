//! Small f32 vector kernels for the CPU ops that are not weight matmuls
//! (attention, norms). Written as 8-lane array code that LLVM turns into one
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

/// `[dot(a, b[0]), .., dot(a, b[R - 1])]` for the R rows of b: [R, a.len()], each
/// bit-identical to [`dot`] (the same operations in the same order per row), the
/// rows interleaved so that their dependency chains overlap.
#[inline(always)]
pub fn dot_rows<const R: usize>(a: &[f32], b: &[f32]) -> [f32; R] {
    let n = a.len();
    let b = &b[..R * n];
    let full = n / 8 * 8;
    let mut acc = [[0f32; 8]; R]; // [R, 8]
    for c in (0..full).step_by(8) {
        let x: &[f32; 8] = a[c..c + 8].try_into().unwrap();
        #[allow(clippy::needless_range_loop)] // indexed: keeps `acc` in registers
        for r in 0..R {
            let y: &[f32; 8] = b[r * n + c..r * n + c + 8].try_into().unwrap();
            for i in 0..8 {
                acc[r][i] += x[i] * y[i];
            }
        }
    }
    let mut out = [0f32; R];
    for (r, (o, acc)) in out.iter_mut().zip(&acc).enumerate() {
        let mut s = 0f32;
        for (x, y) in a[full..].iter().zip(&b[r * n + full..(r + 1) * n]) {
            s += x * y;
        }
        let a4 = [
            acc[0] + acc[4],
            acc[1] + acc[5],
            acc[2] + acc[6],
            acc[3] + acc[7],
        ];
        *o = s + (a4[0] + a4[2]) + (a4[1] + a4[3]);
    }
    out
}

/// `y += w[s]·x[s]` for s = 0, 1, .. in order; x: [w.len(), y.len()]. Bit-identical
/// to calling [`axpy`] once per s, but `y` stays in registers across the rows.
#[inline(always)]
pub fn axpy_rows(y: &mut [f32], w: &[f32], x: &[f32]) {
    let d = y.len();
    debug_assert!(x.len() >= w.len() * d);
    let mut c = 0;
    // 64 lanes at a time: eight independent accumulation chains.
    while c + 64 <= d {
        axpy_rows_at::<64>(y, w, x, c);
        c += 64;
    }
    while c + 8 <= d {
        axpy_rows_at::<8>(y, w, x, c);
        c += 8;
    }
    for e in c..d {
        for (s, &ws) in w.iter().enumerate() {
            y[e] += ws * x[s * d + e];
        }
    }
}

/// [`axpy_rows`] for lanes `c..c + L` of `y`.
#[inline(always)]
fn axpy_rows_at<const L: usize>(y: &mut [f32], w: &[f32], x: &[f32], c: usize) {
    let d = y.len();
    let mut acc: [f32; L] = y[c..c + L].try_into().unwrap();
    for (s, &ws) in w.iter().enumerate() {
        let xs: &[f32; L] = x[s * d + c..s * d + c + L].try_into().unwrap();
        for i in 0..L {
            acc[i] += ws * xs[i];
        }
    }
    y[c..c + L].copy_from_slice(&acc);
}

/// `max(x)` (`-inf` when empty), as a fold of `f32::max` in 8 lanes. The maximum of a
/// set does not depend on the order it is taken in, except for the sign of a zero
/// maximum, which `exp(x - max)` does not see.
#[inline(always)]
pub fn max(x: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; 8];
    let mut c = x.chunks_exact(8);
    for v in &mut c {
        for i in 0..8 {
            m[i] = m[i].max(v[i]);
        }
    }
    let r = c
        .remainder()
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    m.into_iter().fold(r, f32::max)
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

    fn vals(n: usize, k: f32) -> Vec<f32> {
        (0..n).map(|i| ((i as f32 + 1.0) * k).sin() * 3.0).collect()
    }

    #[test]
    fn dot_rows_is_dot_bit_for_bit() {
        for n in [0usize, 1, 7, 8, 9, 16, 64, 70, 130] {
            let a = vals(n, 0.37);
            let b = vals(8 * n, 0.11);
            for (r, got) in with_avx2(|| dot_rows::<8>(&a, &b)).into_iter().enumerate() {
                let row = &b[r * n..(r + 1) * n];
                assert_eq!(got.to_bits(), dot(&a, row).to_bits(), "n={n} row {r}");
                assert_eq!(got.to_bits(), with_avx2(|| dot(&a, row)).to_bits());
            }
        }
    }

    #[test]
    fn axpy_rows_is_axpy_bit_for_bit() {
        for d in [1usize, 7, 8, 9, 64, 72, 130] {
            for rows in [0usize, 1, 5, 16] {
                let w = vals(rows, 0.7);
                let x = vals(rows * d, 0.13);
                let mut want = vals(d, 0.29);
                let mut got = want.clone();
                for (s, &ws) in w.iter().enumerate() {
                    axpy(&mut want, ws, &x[s * d..(s + 1) * d]);
                }
                with_avx2(|| axpy_rows(&mut got, &w, &x));
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "d={d} rows={rows}");
            }
        }
    }
}
