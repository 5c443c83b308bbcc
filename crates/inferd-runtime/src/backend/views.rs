//! What `Backend::load_weight` reads: the named tensors of one weight, checked to form a
//! vector (1-D, concatenated) or a matrix (2-D, stacked along rows: fused projections need
//! the same dtype and column count). Shared by every backend's loader.

use inferd_formats::{FormatError, TensorView};

use super::SharedSource;
use crate::{Result, RuntimeError};

pub enum WeightViews<'a> {
    /// 1-D tensors (norm weights, biases), concatenated in order.
    Vector(Vec<TensorView<'a>>),
    /// 2-D tensors stacked along rows: `[rows, cols]` in all.
    Matrix {
        views: Vec<TensorView<'a>>,
        rows: usize,
        cols: usize,
    },
}

pub fn weight_views<'a>(src: &'a SharedSource, names: &[&str]) -> Result<WeightViews<'a>> {
    let views: Vec<TensorView<'_>> = names
        .iter()
        .map(|n| src.tensor(n))
        .collect::<std::result::Result<_, _>>()?;
    let first = *views
        .first()
        .ok_or_else(|| RuntimeError::Other("load_weight: no tensor names".into()))?;
    if first.shape.len() == 1 {
        return Ok(WeightViews::Vector(views));
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
    if let Some(v) = views[1..]
        .iter()
        .find(|v| v.dtype != first.dtype || v.shape.len() != 2 || v.shape[1] != cols)
    {
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
    let rows = views.iter().map(|v| v.shape[0]).sum();
    Ok(WeightViews::Matrix { views, rows, cols })
}
