//! The Q8 KV row format: one (token, kv head) row of `head_dim` values stored as
//! i8 with one f32 scale, symmetric: `scale = max|x| / 127`, `q = round(x / scale)`
//! (half away from zero, clamped to ±127), `x̂ = q · scale`. Every backend must
//! quantize this way so that exported blocks mean the same everywhere.
//!
//! K rows are quantized minus their (layer, kv head)'s K offset
//! ([`quantize_row_minus`]; see [`crate::kv`]), so for K, `x` above is `k - c`.
//!
//! Error bound: `|x - x̂| ≤ scale / 2` per value (up to f32 rounding of the
//! division and the product), i.e. at most `max|x| / 254` of the row's largest
//! value. A row of zeros has scale 0 and dequantizes to zeros.

/// Quantizes `x` into `q` (same length) and returns the scale.
#[inline]
pub fn quantize_row(x: &[f32], q: &mut [i8]) -> f32 {
    quantize_with(x, None, 127.0, q, to_i8)
}

/// Quantizes `x - offset` (elementwise, one f32 subtraction each) into `q` and returns
/// the scale: exactly [`quantize_row`] of the difference. Used for K rows, which are
/// stored minus their (layer, kv head)'s K offset (see [`crate::kv`]).
#[inline]
pub fn quantize_row_minus(x: &[f32], offset: &[f32], q: &mut [i8]) -> f32 {
    quantize_with(x, Some(offset), 127.0, q, to_i8)
}

/// `v` rounded half away from zero, clamped to ±127 (`as i8` saturates and maps NaN to 0;
/// the clamp documents the range).
#[inline(always)]
fn to_i8(v: f32) -> i8 {
    v.round().clamp(-127.0, 127.0) as i8
}

/// The arithmetic both 8-bit row formats share (Q8 here, Fp8 in [`super::fp8`]): with
/// `d = x - offset` (or `x`), `scale = max|d| / max` and code i `encode(d[i] / scale)`.
/// A zero or non-finite scale (a row of zeros; an infinite value: the scale is kept, so
/// the row dequantizes to NaN and stays visible) gives zero codes. A NaN value is skipped
/// by the max and encoded as `encode(NaN)` (Q8: 0).
#[inline]
pub(crate) fn quantize_with<T: Copy + Default>(
    x: &[f32],
    offset: Option<&[f32]>,
    max: f32,
    q: &mut [T],
    encode: impl Fn(f32) -> T,
) -> f32 {
    debug_assert_eq!(x.len(), q.len());
    debug_assert!(offset.is_none_or(|c| c.len() == x.len()));
    let diff = |i: usize| match offset {
        Some(c) => x[i] - c[i],
        None => x[i],
    };
    let amax = (0..x.len()).fold(0f32, |m, i| m.max(diff(i).abs()));
    let scale = amax / max;
    if scale == 0.0 || !scale.is_finite() {
        q.fill(T::default());
        return scale;
    }
    for (i, qi) in q.iter_mut().enumerate() {
        *qi = encode(diff(i) / scale);
    }
    scale
}

/// `out[i] = q[i] · scale`. Exact per element (one f32 product), so the result never
/// depends on vector width or on which caller dequantizes.
#[inline(always)]
pub fn dequantize_row(q: &[i8], scale: f32, out: &mut [f32]) {
    debug_assert_eq!(q.len(), out.len());
    for (o, &qi) in out.iter_mut().zip(q) {
        *o = qi as f32 * scale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Vec<f32>> {
        let wave = |n: usize, k: f32, a: f32| -> Vec<f32> {
            (0..n).map(|i| ((i as f32 + 1.0) * k).sin() * a).collect()
        };
        let mut rows = vec![
            wave(64, 0.37, 3.0),
            wave(64, 1.3, 0.01),
            wave(128, 0.11, 250.0),
            wave(7, 2.1, 1.0),
            vec![0.0; 16],
            vec![-5.0; 16],
        ];
        // an outlier: the rest of the row is coarse, still within the bound
        let mut outlier = wave(64, 0.5, 0.2);
        outlier[10] = 40.0;
        rows.push(outlier);
        rows
    }

    #[test]
    fn round_trip_error_is_at_most_half_a_step() {
        for x in rows() {
            let mut q = vec![0i8; x.len()];
            let scale = quantize_row(&x, &mut q);
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert_eq!(scale, amax / 127.0);
            let mut back = vec![0f32; x.len()];
            dequantize_row(&q, scale, &mut back);
            for (i, (a, b)) in x.iter().zip(&back).enumerate() {
                // scale/2, plus a few ulps for the rounded division and product
                let bound = scale / 2.0 * (1.0 + 1e-6) + a.abs() * f32::EPSILON;
                assert!(
                    (a - b).abs() <= bound,
                    "value {i}: {a} -> {b} (scale {scale})"
                );
            }
            // the largest value is represented exactly up to rounding
            if amax > 0.0 {
                assert!(q.iter().any(|&v| v.unsigned_abs() == 127));
            }
        }
    }

    #[test]
    fn minus_offset_is_quantize_of_the_difference() {
        for x in rows() {
            let offset: Vec<f32> = (0..x.len()).map(|i| (i as f32 * 0.7).cos() * 9.0).collect();
            let diff: Vec<f32> = x.iter().zip(&offset).map(|(a, b)| a - b).collect();
            let (mut q1, mut q2) = (vec![0i8; x.len()], vec![0i8; x.len()]);
            let s1 = quantize_row_minus(&x, &offset, &mut q1);
            let s2 = quantize_row(&diff, &mut q2);
            assert_eq!(s1.to_bits(), s2.to_bits());
            assert_eq!(q1, q2);
            // a zero offset changes nothing
            let s0 = quantize_row_minus(&x, &vec![0.0; x.len()], &mut q1);
            assert_eq!(s0.to_bits(), quantize_row(&x, &mut q2).to_bits());
            assert_eq!(q1, q2);
        }
    }

    #[test]
    fn zero_row_has_zero_scale() {
        let mut q = [1i8; 8];
        assert_eq!(quantize_row(&[0.0; 8], &mut q), 0.0);
        assert_eq!(q, [0; 8]);
    }
}
