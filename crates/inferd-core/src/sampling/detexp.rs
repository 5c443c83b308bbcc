//! A deterministic, branch-free `exp` for non-positive `f32` arguments, built from IEEE
//! `+ - *` and an int conversion only, so sampling weights (and hence the drawn token) are
//! bit-identical on every platform, unlike the platform libm's `exp`. It auto-vectorises.

const LN2_HI: f32 = 0.693_145_751_953_125; // ln 2 rounded to 16 significant bits (exact k·hi)
const LN2_LO: f32 = 1.428_606_765_330_187e-6; // ln 2 - LN2_HI
const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// Below this `e^x` would leave the normal `f32` range; the result is flushed to 0.
const MIN_ARG: f32 = -87.0;

/// Taylor coefficients `1/n!`, n = 0..=7, of `e^r` for `|r| <= ln2/2` (error < 1e-8).
const C: [f32; 8] = [
    1.0,
    1.0,
    0.5,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
];

/// `e^x` for `x <= 0` (relative error about 2e-7); `x < -87`, `-inf` and `NaN` give `0`.
#[inline]
pub fn exp_nonpos(x: f32) -> f32 {
    let xc = x.max(MIN_ARG).min(0.0); // NaN → MIN_ARG, masked below
                                      // xc = k·ln2 + r with |r| <= ln2/2: truncating y - 0.5 rounds y <= 0 to nearest.
    let k = (xc * LOG2_E - 0.5) as i32; // in [-126, 0]
    let kf = k as f32;
    let r = (xc - kf * LN2_HI) - kf * LN2_LO;
    let mut p = C[7];
    for c in C[..7].iter().rev() {
        p = p * r + c;
    }
    let scale = f32::from_bits(((k + 127) as u32) << 23); // 2^k, a normal float
    if x >= MIN_ARG {
        p * scale
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_std_exp() {
        let mut x = 0.0f32;
        while x >= MIN_ARG {
            let (a, b) = (exp_nonpos(x) as f64, (x as f64).exp());
            assert!((a - b).abs() <= 3e-7 * b, "x={x}: {a} vs {b}");
            x -= 0.001_37;
        }
        assert_eq!(exp_nonpos(0.0), 1.0);
        assert_eq!(exp_nonpos(-100.0), 0.0);
        assert_eq!(exp_nonpos(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpos(f32::NAN), 0.0);
    }
}
