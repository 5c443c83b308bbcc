//! CPU activations and weights.

use std::sync::Arc;

use inferd_formats::{DType, TensorSource};
use inferd_quant::WeightMatrix;

/// A row-major f32 matrix.  // [rows, cols]
#[derive(Clone, Debug, PartialEq)]
pub struct CpuTensor {
    pub data: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
}

impl CpuTensor {
    pub fn zeros(rows: usize, cols: usize) -> Self {
        CpuTensor {
            data: vec![0.0; rows * cols],
            rows,
            cols,
        }
    }

    /// An empty `[0, 0]` tensor holding up to `capacity` elements without reallocating.
    pub fn with_capacity(capacity: usize) -> Self {
        CpuTensor {
            data: Vec::with_capacity(capacity),
            rows: 0,
            cols: 0,
        }
    }

    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }
}

impl crate::backend::DeviceTensor for CpuTensor {
    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    fn capacity(&self) -> usize {
        self.data.capacity()
    }

    fn set_shape(&mut self, rows: usize, cols: usize) -> crate::Result<()> {
        let n = rows * cols;
        if n > self.data.capacity() {
            return Err(crate::RuntimeError::BadBatch(format!(
                "a [{rows}, {cols}] activation does not fit its buffer of {} values",
                self.data.capacity()
            )));
        }
        // Within the capacity: no allocation (contents are unspecified to callers).
        self.data.resize(n, 0.0);
        self.rows = rows;
        self.cols = cols;
        Ok(())
    }
}

/// Weight bytes: borrowed from the memory map (zero-copy) or owned (fused or converted).
pub enum WeightBytes {
    Owned(Vec<u8>),
    /// A slice of a mapped file; `_owner` keeps the map alive.
    Mapped {
        _owner: Arc<dyn TensorSource>,
        ptr: *const u8,
        len: usize,
    },
}

// SAFETY: the mapped bytes are immutable and live as long as `_owner`.
unsafe impl Send for WeightBytes {}
unsafe impl Sync for WeightBytes {}

impl WeightBytes {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            WeightBytes::Owned(v) => v,
            // SAFETY: ptr/len came from a slice of the map owned by `_owner`.
            WeightBytes::Mapped { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(*ptr, *len)
            },
        }
    }
}

pub enum CpuWeight {
    /// `[rows, cols]` in its stored type (linear weights, embedding tables).
    Matrix {
        dtype: DType,
        rows: usize,
        cols: usize,
        bytes: WeightBytes,
    },
    /// A vector in f32 (norm weights, biases).  // [len]
    Vector(Vec<f32>),
}

impl CpuWeight {
    pub fn matrix(&self) -> WeightMatrix<'_> {
        match self {
            CpuWeight::Matrix {
                dtype,
                rows,
                cols,
                bytes,
            } => WeightMatrix {
                dtype: *dtype,
                rows: *rows,
                cols: *cols,
                data: bytes.as_slice(),
            },
            CpuWeight::Vector(_) => panic!("a vector weight used as a matrix (model code bug)"),
        }
    }

    pub fn vector(&self) -> &[f32] {
        match self {
            CpuWeight::Vector(v) => v,
            CpuWeight::Matrix { .. } => panic!("a matrix weight used as a vector (model code bug)"),
        }
    }
}
