//! The Fp8 KV row format: one (token, kv head) row of `head_dim` values stored as fp8
//! e4m3 (OCP "e4m3fn": 1 sign, 4 exponent bits of bias 7, 3 mantissa bits, no
//! infinities, ±448 the largest finite value, 0x7f/0xff NaN) with one f32 scale:
//! `scale = max|x| / 448`, `code = e4m3(x / scale)` (round to nearest even, clamped to
//! ±448), `x̂ = value(code) · scale`. This is what CUDA's `__nv_cvt_float_to_fp8(…,
//! __NV_SATFINITE, __NV_E4M3)` computes, so both backends write the same codes for the
//! same input. K rows are quantized minus their (layer, kv head)'s K offset, as Q8's.
//!
//! Error bound: within a row, `|x - x̂| ≤ |x| / 16` for `|x / scale| ≥ 2^-6` (3 mantissa
//! bits, half a step), and `≤ scale · 2^-10` below (subnormals, steps of 2^-9). A row of
//! zeros has scale 0 and dequantizes to zeros; an infinite value makes the scale infinite
//! (codes zero); a NaN value is skipped by the row's max and stored as the NaN code.

/// The largest finite e4m3 value.
pub const MAX: f32 = 448.0;

/// `x` rounded to e4m3 (nearest even, saturating to ±448; any NaN is 0x7f, as CUDA's
/// conversion writes it).
pub fn encode(x: f32) -> u8 {
    if x.is_nan() {
        return 0x7f;
    }
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    let a = x.abs();
    if a >= MAX {
        return sign | 0x7e;
    }
    if a < 1.0 / 64.0 {
        // Subnormals (and zero): a multiple m of 2^-9, m in 0..=8 (8 is the smallest
        // normal, 0x08). The scaling is exact, so this is one rounding.
        return sign | (a * 512.0).round_ties_even() as u8;
    }
    let bits = a.to_bits();
    let exp = (bits >> 23) as i32 - 127; // -6..=8
    let mant = bits & 0x7f_ffff;
    let (mut m3, rest) = (mant >> 20, mant & 0xf_ffff);
    const HALF: u32 = 1 << 19;
    if rest > HALF || (rest == HALF && m3 & 1 == 1) {
        m3 += 1;
    }
    let mut e = exp + 7;
    if m3 == 8 {
        m3 = 0;
        e += 1;
    }
    // a < 448 keeps (e, m3) at or below (15, 6), the code of 448.
    sign | ((e as u8) << 3) | m3 as u8
}

/// The value of an e4m3 code.
#[inline(always)]
pub fn decode(c: u8) -> f32 {
    LUT[c as usize]
}

const fn value(c: u8) -> f32 {
    let e = ((c >> 3) & 0xf) as i32;
    let m = (c & 7) as u32;
    let mag = if e == 15 && m == 7 {
        f32::NAN
    } else if e == 0 {
        // m · 2^-9, exact
        f32::from_bits(((127 - 9) << 23) as u32) * m as f32
    } else {
        f32::from_bits((((e - 7 + 127) as u32) << 23) | (m << 20))
    };
    if c & 0x80 != 0 {
        -mag
    } else {
        mag
    }
}

static LUT: [f32; 256] = {
    let mut t = [0f32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = value(i as u8);
        i += 1;
    }
    t
};

/// Quantizes `x` (minus `offset`, elementwise, when given) into `q` (same length) and
/// returns the scale (the arithmetic of [`super::q8::quantize_with`]).
pub fn quantize_row(x: &[f32], offset: Option<&[f32]>, q: &mut [u8]) -> f32 {
    super::q8::quantize_with(x, offset, MAX, q, encode)
}

/// `out[i] = value(q[i]) · scale`: one exact product per value.
#[inline(always)]
pub fn dequantize_row(q: &[u8], scale: f32, out: &mut [f32]) {
    debug_assert_eq!(q.len(), out.len());
    for (o, &c) in out.iter_mut().zip(q) {
        *o = decode(c) * scale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_encoding_is_nearest_even() {
        for c in 0..=255u8 {
            let v = decode(c);
            if v.is_nan() {
                assert!(c & 0x7f == 0x7f, "code {c:#x}");
                assert_eq!(encode(v), 0x7f);
                continue;
            }
            // -0 encodes as 0x80, which is -0's own code
            assert_eq!(encode(v), c, "code {c:#x} = {v}");
        }
        assert_eq!(decode(0x7e), 448.0);
        assert_eq!(decode(0x08), 1.0 / 64.0);
        assert_eq!(decode(0x01), 1.0 / 512.0);
        assert_eq!(encode(1e9), 0x7e);
        assert_eq!(encode(-1e9), 0xfe);
        assert_eq!(encode(f32::INFINITY), 0x7e);
        assert_eq!(encode(f32::NAN), 0x7f);
        assert_eq!(encode(-f32::NAN), 0x7f);
        // Every value between two neighbours goes to the nearer, ties to the even code.
        let finite: Vec<(u8, f32)> = (0..0x7fu8).map(|c| (c, decode(c))).collect();
        for w in finite.windows(2) {
            let ((c0, a), (c1, b)) = (w[0], w[1]);
            let mid = 0.5 * (a + b);
            assert_eq!(encode(a + (mid - a) * 0.99), c0);
            assert_eq!(encode(mid + (b - mid) * 0.01), c1);
            assert_eq!(
                encode(mid),
                if c0 % 2 == 0 { c0 } else { c1 },
                "tie between {a} and {b}"
            );
        }
    }

    #[test]
    fn rows_stay_within_the_bound() {
        let mut rows: Vec<Vec<f32>> = vec![
            (0..64)
                .map(|i| ((i as f32 + 1.0) * 0.37).sin() * 3.0)
                .collect(),
            (0..128)
                .map(|i| ((i as f32 + 1.0) * 0.11).sin() * 250.0)
                .collect(),
            vec![0.0; 16],
            vec![-5.0; 16],
        ];
        rows[0][10] = 40.0; // an outlier
        for x in &rows {
            let mut q = vec![0u8; x.len()];
            let s = quantize_row(x, None, &mut q);
            let mut back = vec![0f32; x.len()];
            dequantize_row(&q, s, &mut back);
            for (a, b) in x.iter().zip(&back) {
                let bound = (a.abs() / 16.0).max(s / 1024.0) * 1.0001;
                assert!((a - b).abs() <= bound, "{a} came back as {b} (scale {s})");
            }
        }
        // minus an offset: exactly the row of differences
        let x: Vec<f32> = (0..32).map(|i| i as f32 * 0.5 - 3.0).collect();
        let c: Vec<f32> = (0..32).map(|i| (i % 5) as f32).collect();
        let d: Vec<f32> = x.iter().zip(&c).map(|(a, b)| a - b).collect();
        let (mut q1, mut q2) = (vec![0u8; 32], vec![0u8; 32]);
        assert_eq!(
            quantize_row(&x, Some(&c), &mut q1),
            quantize_row(&d, None, &mut q2)
        );
        assert_eq!(q1, q2);
        let mut q = vec![1u8; 4];
        assert!(quantize_row(&[f32::NAN, 1.0, 2.0, 3.0], None, &mut q).is_finite());
        assert!(!quantize_row(&[f32::INFINITY, 1.0, 2.0, 3.0], None, &mut q).is_finite());
        assert_eq!(q, vec![0; 4]);
    }
}
