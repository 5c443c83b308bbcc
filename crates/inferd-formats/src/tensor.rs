//! Zero-copy views of tensors inside a memory-mapped file, and the trait that
//! lets model loading read GGUF and safetensors the same way.
//!
//! Shape convention: row-major, outermost dimension first (PyTorch order).
//! The last dimension is the contiguous one; a linear weight is `[out, in]`.

use std::path::Path;

use crate::{DType, FormatError, Result};

/// A borrowed tensor: its name, type, shape and raw little-endian bytes.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub name: &'a str,
    pub dtype: DType,
    /// Row-major, outermost first; the last dimension is contiguous.
    pub shape: &'a [usize],
    /// Raw bytes in the file's layout: `dtype.bytes_for(numel())` bytes.
    pub data: &'a [u8],
    /// The file the bytes live in (for error messages).
    pub file: &'a Path,
}

impl<'a> TensorView<'a> {
    /// Number of elements (1 for a zero-dimensional tensor).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Fails with `BadShape` (naming file, tensor, expected and found) unless
    /// the shape is exactly `expected`.
    pub fn expect_shape(&self, expected: &[usize]) -> Result<()> {
        if self.shape == expected {
            return Ok(());
        }
        Err(FormatError::BadShape {
            path: self.file.to_path_buf(),
            tensor: self.name.to_string(),
            expected: format!("{expected:?}"),
            found: format!("{:?}", self.shape),
        })
    }

    /// Bytes of one row (the innermost dimension); the whole data for a
    /// zero-dimensional tensor.
    pub fn row_bytes(&self) -> usize {
        match self.shape.last() {
            Some(&n) => self.dtype.bytes_for(n).unwrap_or(0),
            None => self.data.len(),
        }
    }

    /// Number of rows: the product of all dimensions but the last.
    pub fn n_rows(&self) -> usize {
        match self.shape.split_last() {
            Some((_, outer)) => outer.iter().product(),
            None => 1,
        }
    }

    /// Converts an F32, F16 or BF16 tensor to `f32` values (row-major).
    /// Quantized types give `UnsupportedType`.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        // [numel]
        let out: Vec<f32> = match self.dtype {
            DType::F32 => self
                .data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            DType::F16 => self
                .data
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            DType::BF16 => self
                .data
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(FormatError::UnsupportedType {
                    path: self.file.to_path_buf(),
                    tensor: self.name.to_string(),
                    dtype: format!("{other} (to_f32_vec reads only F32, F16 and BF16)"),
                })
            }
        };
        if out.len() != self.numel() {
            return Err(FormatError::invalid_tensor(
                self.file,
                self.name,
                format!(
                    "{} bytes hold {} elements, shape {:?} needs {}",
                    self.data.len(),
                    out.len(),
                    self.shape,
                    self.numel()
                ),
            ));
        }
        Ok(out)
    }
}

/// Anything that hands out tensors by name: a GGUF file, a safetensors model.
pub trait TensorSource: Send + Sync {
    /// The file (or directory, for sharded models) the tensors come from.
    fn path(&self) -> &Path;
    /// The tensor called `name`; `MissingTensor` naming the file if absent.
    fn tensor(&self, name: &str) -> Result<TensorView<'_>>;
    /// Whether a tensor called `name` exists.
    fn has(&self, name: &str) -> bool;
    /// All tensor names, in file order.
    fn tensor_names(&self) -> Vec<&str>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(dtype: DType, shape: &'a [usize], data: &'a [u8]) -> TensorView<'a> {
        TensorView {
            name: "w",
            dtype,
            shape,
            data,
            file: Path::new("m.gguf"),
        }
    }

    #[test]
    fn f32_f16_bf16_to_f32() {
        let vals = [1.5f32, -2.0, 0.25, 65504.0];
        let f32_bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(
            view(DType::F32, &[2, 2], &f32_bytes).to_f32_vec().unwrap(),
            vals
        );
        // f16 bit patterns: 1.5 = 0x3E00, -2 = 0xC000, 0.25 = 0x3400, 65504 = 0x7BFF.
        let f16_bytes: Vec<u8> = [0x3E00u16, 0xC000, 0x3400, 0x7BFF]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            view(DType::F16, &[4], &f16_bytes).to_f32_vec().unwrap(),
            vals
        );
        // bf16 is the top half of the f32 bits: 1.5 = 0x3FC0, -2 = 0xC000, 0.25 = 0x3E80.
        let bf16_bytes: Vec<u8> = [0x3FC0u16, 0xC000, 0x3E80]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            view(DType::BF16, &[3], &bf16_bytes).to_f32_vec().unwrap(),
            [1.5, -2.0, 0.25]
        );
    }

    #[test]
    fn quantized_to_f32_is_unsupported() {
        let data = vec![0u8; 34];
        let err = view(DType::Q8_0, &[32], &data).to_f32_vec().unwrap_err();
        assert!(matches!(err, FormatError::UnsupportedType { .. }), "{err}");
        assert!(err.to_string().contains("m.gguf"));
        assert!(err.to_string().contains("'w'"));
    }

    #[test]
    fn expect_shape_names_everything() {
        let data = vec![0u8; 24];
        let v = view(DType::F32, &[2, 3], &data);
        v.expect_shape(&[2, 3]).unwrap();
        let err = v.expect_shape(&[3, 2]).unwrap_err();
        assert!(matches!(err, FormatError::BadShape { .. }));
        assert_eq!(
            err.to_string(),
            "m.gguf: tensor 'w' has shape [2, 3], expected [3, 2]"
        );
        assert_eq!(v.numel(), 6);
        assert_eq!(v.n_rows(), 2);
        assert_eq!(v.row_bytes(), 12);
    }
}
