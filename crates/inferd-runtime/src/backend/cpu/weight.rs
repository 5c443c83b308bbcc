//! Loading weights from a mapped model file: zero-copy for single tensors,
//! concatenated copies for fused projections, f32 vectors for norms and biases.

use inferd_formats::{DType, FormatError, TensorView};

use super::tensor::{CpuWeight, WeightBytes};
use crate::backend::SharedSource;
use crate::{Result, RuntimeError};

pub fn load(src: &SharedSource, names: &[&str]) -> Result<CpuWeight> {
    let views: Vec<TensorView<'_>> = names
        .iter()
        .map(|n| src.tensor(n))
        .collect::<std::result::Result<_, _>>()?;
    let first = views
        .first()
        .ok_or_else(|| RuntimeError::Other("load_weight: no tensor names".into()))?;
    if first.shape.len() == 1 {
        let mut v = Vec::new();
        for view in &views {
            v.extend(view.to_f32_vec()?);
        }
        return Ok(CpuWeight::Vector(v));
    }
    if first.shape.len() != 2 {
        return Err(FormatError::BadShape {
            path: src.path().to_path_buf(),
            tensor: first.name.to_string(),
            expected: "a matrix".into(),
            found: format!("{:?}", first.shape),
        }
        .into());
    }
    let cols = first.shape[1];
    for v in &views[1..] {
        if v.dtype != first.dtype || v.shape.len() != 2 || v.shape[1] != cols {
            return Err(RuntimeError::Other(format!(
                "{}: cannot fuse '{}' ({} {:?}) with '{}' ({} {:?})",
                src.path().display(),
                first.name,
                first.dtype,
                first.shape,
                v.name,
                v.dtype,
                v.shape
            )));
        }
    }
    let rows: usize = views.iter().map(|v| v.shape[0]).sum();
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
