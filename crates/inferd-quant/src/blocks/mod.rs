//! Block layouts (bit-exact GGML), dequantization, reference quantizers and
//! scalar dot products, one file per weight type.

pub mod float;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;

use crate::DType;

/// Little-endian f16 at byte offset `off`, as f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], off: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32()
}

/// Store `v` as a little-endian f16 at byte offset `off`.
#[inline(always)]
pub(crate) fn put_f16(b: &mut [u8], off: usize, v: f32) {
    b[off..off + 2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
}

/// Decode `dst.len()` elements from `src` (whole blocks). Sizes are checked by callers.
#[inline(always)]
pub(crate) fn dequantize_unchecked(dtype: DType, src: &[u8], dst: &mut [f32]) {
    match dtype {
        DType::F32 => float::dequantize_f32(src, dst),
        DType::F16 => float::dequantize_f16(src, dst),
        DType::BF16 => float::dequantize_bf16(src, dst),
        DType::Q8_0 => q8_0::dequantize_row(src, dst),
        DType::Q4_0 => q4_0::dequantize_row(src, dst),
        DType::Q4_1 => q4_1::dequantize_row(src, dst),
        DType::Q5_0 => q5_0::dequantize_row(src, dst),
        DType::Q4K => q4_k::dequantize_row(src, dst),
        DType::Q5K => q5_k::dequantize_row(src, dst),
        DType::Q6K => q6_k::dequantize_row(src, dst),
    }
}

/// Same as [`dequantize_unchecked`], compiled for AVX2 so the loops auto-vectorize.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dequantize_avx2(dtype: DType, src: &[u8], dst: &mut [f32]) {
    dequantize_unchecked(dtype, src, dst)
}

/// Quantize whole blocks; `src.len()` must be a multiple of the block length.
pub(crate) fn quantize_unchecked(dtype: DType, src: &[f32]) -> Vec<u8> {
    let nb = src.len() / dtype.block_len();
    let mut out = vec![0u8; nb * dtype.block_bytes()];
    match dtype {
        DType::F32 => return float::quantize_f32(src),
        DType::F16 => return float::quantize_f16(src),
        DType::BF16 => return float::quantize_bf16(src),
        DType::Q8_0 => q8_0::quantize_row(src, &mut out),
        DType::Q4_0 => q4_0::quantize_row(src, &mut out),
        DType::Q4_1 => q4_1::quantize_row(src, &mut out),
        DType::Q5_0 => q5_0::quantize_row(src, &mut out),
        DType::Q4K => q4_k::quantize_row(src, &mut out),
        DType::Q5K => q5_k::quantize_row(src, &mut out),
        DType::Q6K => q6_k::quantize_row(src, &mut out),
    }
    out
}
