//! CUDA activations and weights.
//!
//! Activations have f32 semantics and are stored as f32 or bf16, whichever their
//! producer writes: matrix-product inputs (norm outputs, the gated activation, the
//! attention output) are bf16, as cuBLASLt's bf16 path reads them; the residual stream,
//! projection outputs and logits are f32. Each tensor records what it holds.

use super::device::DeviceBuffer;
use crate::backend::DeviceTensor;
use crate::{Result, RuntimeError};

/// The element type a tensor holds now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    F32,
    Bf16,
}

/// `[rows, cols]` row-major on the device, in a buffer of `capacity` f32-sized elements.
pub struct CudaTensor {
    pub(super) buf: DeviceBuffer,
    capacity: usize,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) dtype: Act,
}

impl CudaTensor {
    pub(super) fn new(buf: DeviceBuffer, capacity: usize) -> Self {
        CudaTensor {
            buf,
            capacity,
            rows: 0,
            cols: 0,
            dtype: Act::F32,
        }
    }

    pub fn dtype(&self) -> Act {
        self.dtype
    }

    pub(super) fn len(&self) -> usize {
        self.rows * self.cols
    }

    pub(super) fn f32_ptr(&self, op: &str) -> Result<*mut f32> {
        self.expect(Act::F32, op)?;
        Ok(self.buf.at(0))
    }

    /// The buffer, whichever element type it holds now (see [`CudaTensor::dtype`]).
    pub(super) fn any_ptr(&self) -> *const std::ffi::c_void {
        self.buf.ptr()
    }

    pub(super) fn bf16_ptr(&self, op: &str) -> Result<*mut std::ffi::c_void> {
        self.expect(Act::Bf16, op)?;
        Ok(self.buf.ptr())
    }

    /// Sets shape and element type of what an op is about to write.
    pub(super) fn prepare(&mut self, rows: usize, cols: usize, dtype: Act) -> Result<()> {
        self.set_shape(rows, cols)?;
        self.dtype = dtype;
        Ok(())
    }

    fn expect(&self, dtype: Act, op: &str) -> Result<()> {
        if self.dtype != dtype {
            return Err(RuntimeError::BadBatch(format!(
                "{op}: expects a {dtype:?} activation, got {:?}",
                self.dtype
            )));
        }
        Ok(())
    }
}

impl DeviceTensor for CudaTensor {
    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn set_shape(&mut self, rows: usize, cols: usize) -> Result<()> {
        if rows * cols > self.capacity {
            return Err(RuntimeError::BadBatch(format!(
                "a [{rows}, {cols}] activation does not fit its buffer of {} values",
                self.capacity
            )));
        }
        self.rows = rows;
        self.cols = cols;
        Ok(())
    }
}

/// A weight on the device: matrices (linear layers, the embedding table) in bf16,
/// vectors (norm weights, biases) in f32.
pub enum CudaWeight {
    /// `[rows, cols]` bf16, row-major (a linear layer's `[out, in]`).
    Matrix {
        buf: DeviceBuffer,
        rows: usize,
        cols: usize,
    },
    /// `[len]` f32.
    Vector { buf: DeviceBuffer, len: usize },
}

impl CudaWeight {
    pub(super) fn matrix(&self, op: &str) -> Result<(&DeviceBuffer, usize, usize)> {
        match self {
            CudaWeight::Matrix { buf, rows, cols } => Ok((buf, *rows, *cols)),
            CudaWeight::Vector { .. } => Err(RuntimeError::Other(format!(
                "{op}: expects a matrix weight, got a vector"
            ))),
        }
    }

    pub(super) fn vector(&self, op: &str) -> Result<(*const f32, usize)> {
        match self {
            CudaWeight::Vector { buf, len } => Ok((buf.at(0), *len)),
            CudaWeight::Matrix { .. } => Err(RuntimeError::Other(format!(
                "{op}: expects a vector weight, got a matrix"
            ))),
        }
    }
}
