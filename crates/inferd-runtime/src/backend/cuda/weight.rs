//! Loading weights onto the GPU: matrices to bf16 (bf16 files are copied as they are;
//! f32/f16 are rounded; GGUF quantized types are dequantized on the host first), norm
//! weights and biases to f32. Several names concatenate along rows (fused projections).

use std::sync::Arc;

use half::bf16;
use inferd_formats::{DType, TensorView};

use super::device::Device;
use super::tensor::CudaWeight;
use crate::backend::views::{weight_views, WeightViews};
use crate::backend::SharedSource;
use crate::{Result, RuntimeError};

/// Tensor `name` of any rank as an f32 vector of its values, each plus `add`.
pub fn load_vector(
    dev: &Arc<Device>,
    src: &SharedSource,
    name: &str,
    add: f32,
) -> Result<CudaWeight> {
    let mut v = src.tensor(name)?.to_f32_vec()?;
    v.iter_mut().for_each(|x| *x += add);
    let buf = dev.alloc(v.len() * 4)?;
    dev.upload(&buf, 0, as_bytes(&v))?;
    dev.sync()?;
    Ok(CudaWeight::Vector { buf, len: v.len() })
}

pub fn load(dev: &Arc<Device>, src: &SharedSource, names: &[&str]) -> Result<CudaWeight> {
    let (views, rows, cols) = match weight_views(src, names)? {
        WeightViews::Vector(views) => {
            let mut v: Vec<f32> = Vec::new();
            for view in &views {
                v.extend(view.to_f32_vec()?);
            }
            let buf = dev.alloc(v.len() * 4)?;
            dev.upload(&buf, 0, as_bytes(&v))?;
            dev.sync()?;
            return Ok(CudaWeight::Vector { buf, len: v.len() });
        }
        WeightViews::Matrix { views, rows, cols } => (views, rows, cols),
    };
    let buf = dev.alloc(rows * cols * 2)?;
    let mut offset = 0;
    let mut staged: Vec<bf16> = Vec::new();
    for view in &views {
        let bytes = view.shape[0] * cols * 2;
        if view.dtype == DType::BF16 {
            dev.upload(&buf, offset, view.data)?;
        } else {
            staged.clear();
            staged.resize(view.shape[0] * cols, bf16::ZERO);
            to_bf16(view, cols, &mut staged)?;
            dev.upload(&buf, offset, as_bytes(&staged))?;
        }
        offset += bytes;
    }
    dev.sync()?;
    Ok(CudaWeight::Matrix { buf, rows, cols })
}

pub(super) fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: plain-old-data values viewed as their bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

/// Converts one tensor's rows to bf16 (in parallel: a large model's quantized weights
/// are gigabytes).  view [rows, cols] -> out [rows * cols]
fn to_bf16(view: &TensorView<'_>, cols: usize, out: &mut [bf16]) -> Result<()> {
    use rayon::prelude::*;
    let rb = view.row_bytes();
    out.par_chunks_mut(cols).enumerate().try_for_each_init(
        || vec![0f32; cols],
        |row_f32, (r, dst)| {
            let raw = &view.data[r * rb..(r + 1) * rb];
            match view.dtype {
                DType::F32 => {
                    for (d, b) in dst.iter_mut().zip(raw.chunks_exact(4)) {
                        *d = bf16::from_f32(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                    }
                }
                DType::F16 => {
                    for (d, b) in dst.iter_mut().zip(raw.chunks_exact(2)) {
                        *d = bf16::from_f32(half::f16::from_le_bytes([b[0], b[1]]).to_f32());
                    }
                }
                _ => {
                    inferd_quant::try_dequantize_row(view.dtype, raw, row_f32)
                        .map_err(|e| RuntimeError::Other(format!("{}: {e}", view.name)))?;
                    for (d, &x) in dst.iter_mut().zip(row_f32.iter()) {
                        *d = bf16::from_f32(x);
                    }
                }
            }
            Ok(())
        },
    )
}
