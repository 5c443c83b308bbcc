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
/// Blocks of a multiple of 32 elements take the AVX2 version when the CPU has it
/// (bit-identical: the same float ops per element, exact max).
#[inline]
fn quantize_block(src: &[f32], dst: &mut [i8], simd: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd
        && src.len().is_multiple_of(32)
        && dst.len() == src.len()
        && crate::level::detected_level() >= crate::SimdLevel::Avx2
    {
        // SAFETY: AVX2/FMA/F16C detected; lengths checked.
        return unsafe { quantize_block_avx2(src, dst) };
    }
    quantize_block_scalar(src, dst)
}

/// AVX2 [`quantize_block_scalar`]: `max` of |x| in any order (exact; NaN lanes are
/// skipped like `f32::max` does), then per element `v * id`, the same round and
/// clamp, NaN -> 0 as the `as i8` cast does.
///
/// # Safety
/// AVX2/FMA/F16C; `src.len() == dst.len()`, a multiple of 32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_block_avx2(src: &[f32], dst: &mut [i8]) -> f32 {
    use std::arch::x86_64::*;
    let n = src.len();
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
    let absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
    let mut m = _mm256_setzero_ps();
    for i in (0..n).step_by(8) {
        // max_ps returns its second operand when the first is NaN.
        m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(sp.add(i)), absmask), m);
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), m);
    let amax = lanes.iter().fold(0.0f32, |a, &v| a.max(v));
    if amax == 0.0 || !amax.is_finite() {
        dst.fill(0);
        return if amax.is_finite() { 0.0 } else { f32::NAN };
    }
    let d = amax / 127.0;
    let id = _mm256_set1_ps(127.0 / amax);
    let magic = _mm256_set1_ps(12_582_912.0);
    let (lo, hi) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
    let q = |i: usize| {
        let v = _mm256_mul_ps(_mm256_loadu_ps(sp.add(i)), id);
        let r = _mm256_sub_ps(_mm256_add_ps(v, magic), magic);
        // clamp keeping NaN (max/min return the second operand on NaN), then NaN -> 0
        let c = _mm256_min_ps(hi, _mm256_max_ps(lo, r));
        let c = _mm256_and_ps(c, _mm256_cmp_ps::<_CMP_ORD_Q>(c, c));
        _mm256_cvttps_epi32(c)
    };
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for i in (0..n).step_by(32) {
        let ab = _mm256_packs_epi32(q(i), q(i + 8));
        let cd = _mm256_packs_epi32(q(i + 16), q(i + 24));
        let p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), order);
        _mm256_storeu_si256(dp.add(i) as *mut __m256i, p);
    }
    d
}

/// Portable [`quantize_block`].
#[inline]
fn quantize_block_scalar(src: &[f32], dst: &mut [i8]) -> f32 {
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
        Self::quantize_with(x, n, cols, true)
    }

    /// [`Act32::quantize`]; `simd = false` forces the scalar block quantizer (same
    /// bits; for benchmarks of the previous path).
    #[doc(hidden)]
    pub fn quantize_with(x: &[f32], n: usize, cols: usize, simd: bool) -> Act32 {
        debug_assert_eq!(cols % 32, 0);
        debug_assert_eq!(x.len(), n * cols);
        let nb = n * cols / 32;
        let mut qs = vec![0i8; n * cols]; // [n, cols]
        let mut d = vec![0f32; nb]; // [n, cols/32]
        let mut s = vec![0f32; nb]; // [n, cols/32]
        for (b, (src, dst)) in x.chunks_exact(32).zip(qs.chunks_exact_mut(32)).enumerate() {
            let db = quantize_block(src, dst, simd);
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
        Self::quantize_with(x, n, cols, true)
    }

    /// As [`Act32::quantize_with`].
    #[doc(hidden)]
    pub fn quantize_with(x: &[f32], n: usize, cols: usize, simd: bool) -> Act256 {
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
            d[b] = quantize_block(src, dst, simd);
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

    /// The AVX2 block quantizer gives the scalar one's bits, edge values included.
    #[test]
    fn simd_block_matches_scalar() {
        let mut seed = 1u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let mut blocks: Vec<Vec<f32>> = Vec::new();
        for len in [32usize, 256] {
            for scale in [1.0f32, 1e-3, 1e30, 1e-39] {
                blocks.push((0..len).map(|_| next() * scale).collect());
            }
            let mut b: Vec<f32> = (0..len).map(|_| next()).collect();
            b[3] = f32::NAN;
            blocks.push(b.clone());
            b[5] = f32::INFINITY;
            blocks.push(b);
            blocks.push(vec![0.0; len]);
            let mut b = vec![-0.0; len];
            b[7] = 1e-42;
            blocks.push(b);
            // exact halves: ties
            blocks.push((0..len).map(|i| (i as f32 - 16.0) * 0.5).collect());
        }
        for b in &blocks {
            let (mut q1, mut q2) = (vec![0i8; b.len()], vec![0i8; b.len()]);
            let d1 = quantize_block_scalar(b, &mut q1);
            let d2 = quantize_block(b, &mut q2, true);
            assert_eq!(d1.to_bits(), d2.to_bits());
            assert_eq!(q1, q2);
        }
    }

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
