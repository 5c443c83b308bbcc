//! CPU weight kernels for inferd: GGML block layouts (bit-exact), dequantization,
//! reference quantizers, activation quantization, SIMD dot products and the
//! multi-threaded [`linear`] used by every model layer.
//!
//! Layout of the crate:
//! * [`blocks`]: one file per weight type (layout, dequant, quantize, scalar dot).
//! * [`activation`]: 8-bit activation blocks for the integer dot path.
//! * [`simd`]: AVX2 and AVX-512 dot kernels; [`dispatch`] picks one per (type, level).
//! * [`linear`](mod@linear): decode (integer dots) and prefill (packed dequantized tiles, FMA micro-kernels) paths.
//! * [`level`]: runtime SIMD detection, capped by `INFERD_SIMD=scalar|avx2|avx512`.

pub mod activation;
pub mod blocks;
pub mod dispatch;
pub mod error;
pub mod level;
pub mod linear;
mod parallel;
pub mod simd;
mod tile_gemm;
pub mod weight;

pub use error::QuantError;
pub use inferd_formats::DType;
pub use level::{detected_level, simd_level, supported_levels, SimdLevel};
pub use linear::{linear_config, linear_planned, LinearConfig, RowPath, DEFAULT_GEMM_MIN_N};
pub use weight::WeightMatrix;

/// `y[n, rows] = x[n, cols] · Wᵀ` (x and y row-major f32), multi-threaded on the
/// global rayon pool, at [`simd_level`].
///
/// # Panics
/// When `x`/`y` do not match `n` and the matrix shape, or `w` is inconsistent; use
/// [`try_linear`] to get an error instead.
pub fn linear(w: &WeightMatrix, x: &[f32], n: usize, y: &mut [f32]) {
    if let Err(e) = try_linear(w, x, n, y) {
        panic!("inferd-quant linear: {e}");
    }
}

/// [`linear`] returning shape errors instead of panicking.
pub fn try_linear(w: &WeightMatrix, x: &[f32], n: usize, y: &mut [f32]) -> Result<(), QuantError> {
    linear_config(&LinearConfig::default(), w, x, n, y)
}

/// [`linear`] at an explicit SIMD level (clamped to what the CPU supports), so one
/// test body can run every path.
///
/// # Panics
/// As [`linear`].
pub fn linear_with(level: SimdLevel, w: &WeightMatrix, x: &[f32], n: usize, y: &mut [f32]) {
    if let Err(e) = linear_config(&LinearConfig::at_level(level), w, x, n, y) {
        panic!("inferd-quant linear: {e}");
    }
}

fn row_check(dtype: DType, bytes: usize, elems: usize) -> Result<(), QuantError> {
    match dtype.bytes_for(elems) {
        None => Err(QuantError::RaggedRow {
            dtype,
            cols: elems,
            block_len: dtype.block_len(),
        }),
        Some(expected) if expected != bytes => Err(QuantError::RowBytes {
            dtype,
            elems,
            expected,
            actual: bytes,
        }),
        Some(_) => Ok(()),
    }
}

/// Decode one weight row to f32 (`dst.len()` elements from `src`). Used for
/// embedding lookup.
///
/// # Panics
/// When `src` does not hold exactly `dst.len()` elements; see [`try_dequantize_row`].
pub fn dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) {
    if let Err(e) = try_dequantize_row(dtype, src, dst) {
        panic!("inferd-quant dequantize_row: {e}");
    }
}

/// [`dequantize_row`] returning an error on size mismatch.
pub fn try_dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    row_check(dtype, src.len(), dst.len())?;
    linear::dequantize_at(simd_level(), dtype, src, dst);
    Ok(())
}

/// Reference quantizer (round-to-nearest schemes, documented per type in [`blocks`]).
///
/// # Panics
/// When `src.len()` is not a multiple of the block length; see [`try_quantize_row`].
pub fn quantize_row(dtype: DType, src: &[f32]) -> Vec<u8> {
    match try_quantize_row(dtype, src) {
        Ok(v) => v,
        Err(e) => panic!("inferd-quant quantize_row: {e}"),
    }
}

/// [`quantize_row`] returning an error for a ragged row.
pub fn try_quantize_row(dtype: DType, src: &[f32]) -> Result<Vec<u8>, QuantError> {
    if !src.len().is_multiple_of(dtype.block_len()) {
        return Err(QuantError::RaggedRow {
            dtype,
            cols: src.len(),
            block_len: dtype.block_len(),
        });
    }
    Ok(blocks::quantize_unchecked(dtype, src))
}

/// [`try_dequantize_row`] at an explicit SIMD level (clamped to what the CPU supports).
pub fn dequantize_row_with(
    level: SimdLevel,
    dtype: DType,
    src: &[u8],
    dst: &mut [f32],
) -> Result<(), QuantError> {
    row_check(dtype, src.len(), dst.len())?;
    linear::dequantize_at(level, dtype, src, dst);
    Ok(())
}
