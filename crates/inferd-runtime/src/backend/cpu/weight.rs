//! Loading weights from a mapped model file: zero-copy for single tensors,
//! concatenated copies for fused projections, f32 vectors for norms and biases.

use inferd_formats::DType;

use super::tensor::{CpuWeight, WeightBytes};
use crate::backend::views::{weight_views, WeightViews};
use crate::backend::SharedSource;
use crate::Result;

pub fn load(src: &SharedSource, names: &[&str]) -> Result<CpuWeight> {
    let (views, rows, cols) = match weight_views(src, names)? {
        WeightViews::Vector(views) => {
            let mut v = Vec::new();
            for view in &views {
                v.extend(view.to_f32_vec()?);
            }
            return Ok(CpuWeight::Vector(v));
        }
        WeightViews::Matrix { views, rows, cols } => (views, rows, cols),
    };
    let first = views[0];
    let bytes = if views.len() == 1 && first.data.as_ptr() as usize % align_of(first.dtype) == 0 {
        WeightBytes::Mapped {
            _owner: src.clone(),
            ptr: first.data.as_ptr(),
            len: first.data.len(),
        }
    } else {
        let mut v = Vec::with_capacity(views.iter().map(|v| v.data.len()).sum());
        for view in &views {
            v.extend_from_slice(view.data);
        }
        WeightBytes::Owned(v)
    };
    Ok(CpuWeight::Matrix {
        dtype: first.dtype,
        rows,
        cols,
        bytes,
    })
}

/// Alignment the kernels may assume for direct reads of a dtype.
fn align_of(d: DType) -> usize {
    match d {
        DType::F32 => 4,
        DType::F16 | DType::BF16 => 2,
        _ => 1,
    }
}
