//! Errors of the weight kernels.

use inferd_formats::DType;
use thiserror::Error;

/// Bad shapes or sizes handed to the kernels.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum QuantError {
    #[error(
        "{dtype}: a row of {cols} elements is not a whole number of {block_len}-element blocks"
    )]
    RaggedRow {
        dtype: DType,
        cols: usize,
        block_len: usize,
    },
    #[error("{dtype} weight [{rows} x {cols}] needs {expected} bytes, got {actual}")]
    WeightSize {
        dtype: DType,
        rows: usize,
        cols: usize,
        expected: usize,
        actual: usize,
    },
    #[error("linear: {what} has {actual} elements, expected {expected}")]
    ShapeMismatch {
        what: &'static str,
        expected: usize,
        actual: usize,
    },
    #[error("{dtype}: buffer of {actual} bytes does not hold {elems} elements ({expected} bytes)")]
    RowBytes {
        dtype: DType,
        elems: usize,
        expected: usize,
        actual: usize,
    },
}
