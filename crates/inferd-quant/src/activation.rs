//! Activation quantization for the integer dot-product path.
//!
//! Small-batch `linear` (decode) quantizes each activation row once to 8 bits
//! and then runs integer SIMD dot products against the weight blocks:
//!
//! * [`Act32`]: 32-element blocks, `q = round(x / d)`, `d = max|x| / 127`, plus the
//!   per-block sum `s = d * Σq` (GGML's Q8_1 idea). Used with Q8_0, Q4_0 and Q4_1
//!   weights; the sums fold the Q4_0 offset (-8) and the Q4_1 minimum `m` into
//!   one multiply per block.
//! * [`Act256`]: 256-element blocks (GGML's Q8_K idea) with integer sums of each
//!   16-element group (`bsums`), used by the K-quants for their sub-block minimums
//!   (Q4_K, Q5_K) and the -32 offset (Q6_K).
//!
//! Error: every element is off by at most `d / 2` of its block, which bounds the
//! dot-product error by `Σ |w_i| * d_block(i) / 2` (used by the tests).

/// Round to nearest (ties to even) for |v| < 2^22, without a libm call.
#[inline(always)]
pub(crate) fn round_nearest(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
    (v + MAGIC) - MAGIC
}

/// Quantize one block to i8; returns the scale `d` (0 for an all-zero block).
#[inline]
fn quantize_block(src: &[f32], dst: &mut [i8]) -> f32 {
    let amax = src.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 || !amax.is_finite() {
        dst.fill(0);
        return if amax.is_finite() { 0.0 } else { f32::NAN };
    }
    let d = amax / 127.0;
    let id = 127.0 / amax;
    for (q, &v) in dst.iter_mut().zip(src) {
        *q = round_nearest(v * id).clamp(-127.0, 127.0) as i8;
    }
    d
}

/// Activation rows quantized in 32-element blocks.
pub struct Act32 {
    pub n: usize,
    pub cols: usize,
    /// [n, cols] quantized values.
    pub qs: Vec<i8>,
    /// [n, cols / 32] block scales.
    pub d: Vec<f32>,
    /// [n, cols / 32] `d * Σq` per block.
    pub s: Vec<f32>,
}

impl Act32 {
    /// Quantize `x` ([n, cols], cols a multiple of 32).
    pub fn quantize(x: &[f32], n: usize, cols: usize) -> Act32 {
        debug_assert_eq!(cols % 32, 0);
        debug_assert_eq!(x.len(), n * cols);
        let nb = n * cols / 32;
        let mut qs = vec![0i8; n * cols]; // [n, cols]
        let mut d = vec![0f32; nb]; // [n, cols/32]
        let mut s = vec![0f32; nb]; // [n, cols/32]
        for (b, (src, dst)) in x.chunks_exact(32).zip(qs.chunks_exact_mut(32)).enumerate() {
            let db = quantize_block(src, dst);
            let sum: i32 = dst.iter().map(|&q| q as i32).sum();
            d[b] = db;
            s[b] = db * sum as f32;
        }
        Act32 { n, cols, qs, d, s }
    }

    /// View of row `i`.
    pub fn row(&self, i: usize) -> ActRow<'_> {
        let nb = self.cols / 32;
        ActRow {
            qs: &self.qs[i * self.cols..(i + 1) * self.cols],
            d: &self.d[i * nb..(i + 1) * nb],
            s: &self.s[i * nb..(i + 1) * nb],
            bsums: &[],
            x: &[],
        }
    }
}

/// Activation rows quantized in 256-element blocks with 16-element group sums.
pub struct Act256 {
    pub n: usize,
    pub cols: usize,
    /// [n, cols] quantized values.
    pub qs: Vec<i8>,
    /// [n, cols / 256] block scales.
    pub d: Vec<f32>,
    /// [n, cols / 16] Σq of each 16-element group.
    pub bsums: Vec<i16>,
}

impl Act256 {
    /// Quantize `x` ([n, cols], cols a multiple of 256).
    pub fn quantize(x: &[f32], n: usize, cols: usize) -> Act256 {
        debug_assert_eq!(cols % 256, 0);
        debug_assert_eq!(x.len(), n * cols);
        let mut qs = vec![0i8; n * cols]; // [n, cols]
        let mut d = vec![0f32; n * cols / 256]; // [n, cols/256]
        let mut bsums = vec![0i16; n * cols / 16]; // [n, cols/16]
        for (b, (src, dst)) in x
            .chunks_exact(256)
            .zip(qs.chunks_exact_mut(256))
            .enumerate()
        {
            d[b] = quantize_block(src, dst);
            for (g, grp) in dst.chunks_exact(16).enumerate() {
                bsums[b * 16 + g] = grp.iter().map(|&q| q as i16).sum();
            }
        }
        Act256 {
            n,
            cols,
            qs,
            d,
            bsums,
        }
    }

    /// View of row `i`.
    pub fn row(&self, i: usize) -> ActRow<'_> {
        let nb = self.cols / 256;
        ActRow {
            qs: &self.qs[i * self.cols..(i + 1) * self.cols],
            d: &self.d[i * nb..(i + 1) * nb],
            s: &[],
            bsums: &self.bsums[i * self.cols / 16..(i + 1) * self.cols / 16],
            x: &[],
        }
    }
}

/// One activation row as the dot kernels see it. Fields a format does not use are empty.
#[derive(Clone, Copy)]
pub struct ActRow<'a> {
    /// [cols] quantized values.
    pub qs: &'a [i8],
    /// [cols / block] block scales.
    pub d: &'a [f32],
    /// [cols / 32] `d * Σq` (32-element blocks only).
    pub s: &'a [f32],
    /// [cols / 16] group sums (256-element blocks only).
    pub bsums: &'a [i16],
    /// [cols] unquantized row (float weights only).
    pub x: &'a [f32],
}

impl<'a> ActRow<'a> {
    /// A float activation row for F32/F16/BF16 weights.
    pub fn float(x: &'a [f32]) -> ActRow<'a> {
        ActRow {
            qs: &[],
            d: &[],
            s: &[],
            bsums: &[],
            x,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(round_nearest(2.5), 2.0);
        assert_eq!(round_nearest(-1.6), -2.0);
        assert_eq!(round_nearest(126.9), 127.0);
    }

    #[test]
    fn act32_error_within_half_step() {
        let x: Vec<f32> = (0..64).map(|i| ((i * 37) % 23) as f32 - 11.3).collect();
        let a = Act32::quantize(&x, 2, 32);
        for (i, &v) in x.iter().enumerate() {
            let d = a.d[i / 32];
            let back = d * a.qs[i] as f32;
            assert!((back - v).abs() <= d * 0.5 + 1e-6, "{i}: {v} vs {back}");
        }
        let sum0: i32 = a.qs[..32].iter().map(|&q| q as i32).sum();
        assert_eq!(a.s[0], a.d[0] * sum0 as f32);
        // the largest magnitude maps to ±127
        assert_eq!(a.qs.iter().map(|q| q.unsigned_abs()).max(), Some(127));
    }

    #[test]
    fn act256_group_sums() {
        let x: Vec<f32> = (0..512).map(|i| (i as f32 * 0.37).sin()).collect();
        let a = Act256::quantize(&x, 1, 512);
        for g in 0..32 {
            let s: i16 = a.qs[g * 16..g * 16 + 16].iter().map(|&q| q as i16).sum();
            assert_eq!(a.bsums[g], s);
        }
        let z = Act256::quantize(&[0.0; 256], 1, 256);
        assert_eq!(z.d[0], 0.0);
        assert!(z.qs.iter().all(|&q| q == 0));
    }
}
