//! Weight matrix view.

use crate::{DType, QuantError};

/// A row-major weight matrix: `rows` rows of `cols` elements, each row stored as
/// `cols / block_len` blocks of `dtype` (GGML layout; rows are contiguous).
#[derive(Clone, Copy, Debug)]
pub struct WeightMatrix<'a> {
    pub dtype: DType,
    pub rows: usize,
    pub cols: usize,
    /// [rows, row_bytes] raw blocks.
    pub data: &'a [u8],
}

impl<'a> WeightMatrix<'a> {
    /// Check that `cols` is a whole number of blocks and `data` holds exactly `rows` rows.
    pub fn new(dtype: DType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self, QuantError> {
        let row_bytes = dtype.bytes_for(cols).ok_or(QuantError::RaggedRow {
            dtype,
            cols,
            block_len: dtype.block_len(),
        })?;
        let expected = row_bytes.saturating_mul(rows);
        if expected != data.len() {
            return Err(QuantError::WeightSize {
                dtype,
                rows,
                cols,
                expected,
                actual: data.len(),
            });
        }
        Ok(WeightMatrix {
            dtype,
            rows,
            cols,
            data,
        })
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.dtype.block_len() * self.dtype.block_bytes()
    }

    /// Raw bytes of row `r`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Re-check the invariants of [`WeightMatrix::new`] (fields are public).
    pub fn validate(&self) -> Result<(), QuantError> {
        WeightMatrix::new(self.dtype, self.rows, self.cols, self.data).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_sizes() {
        let data = vec![0u8; 2 * 144];
        let w = WeightMatrix::new(DType::Q4K, 2, 256, &data).unwrap();
        assert_eq!(w.row_bytes(), 144);
        assert_eq!(w.row(1).len(), 144);
        assert!(matches!(
            WeightMatrix::new(DType::Q4K, 2, 128, &data),
            Err(QuantError::RaggedRow { .. })
        ));
        assert!(matches!(
            WeightMatrix::new(DType::Q4K, 3, 256, &data),
            Err(QuantError::WeightSize {
                expected: 432,
                actual: 288,
                ..
            })
        ));
    }
}
