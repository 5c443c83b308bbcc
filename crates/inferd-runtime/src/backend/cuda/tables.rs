//! The pool's block tables on the device: the host's [`BlockTables`] (which the pass's
//! slots and FlashInfer's plans read) and its image in device memory, which our attention
//! kernels read, a row of `width` entries per table row. A pass's edits reach the device
//! as (entry, block) pairs in its metadata, written by one kernel (`kernels/tables.cu`)
//! before the pass: a step sends what its sequences appended, not their tables.
//!
//! Device row 0 is all zeros, the table of a graph bucket's padding rows (one position
//! of block 0, read and never written); table row `r` is device row `r + 1`. The image
//! grows (rows and width to powers of two) when an edit does not fit; a grown image is a
//! new buffer with every row uploaded at once, and a new `generation`, so graphs that
//! baked in the old address are captured again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::device::{Device, DeviceBuffer};
use super::weight::as_bytes;
use crate::kv::{BlockTables, TableEdit};
use crate::{Result, RuntimeError};

static GENERATIONS: AtomicU64 = AtomicU64::new(1);

#[derive(Default)]
pub struct DeviceTables {
    pub host: BlockTables,
    /// [rows + 1, width] i32: row 0 zeros, then table row r at r + 1.
    image: Option<DeviceBuffer>,
    rows: usize,
    width: usize,
    /// Distinct for every image made (0: none yet).
    pub generation: u64,
}

impl DeviceTables {
    /// Applies `edits` to the host's tables and returns what the device image needs:
    /// the (entry, block) pairs to write, end to end (`[n, 2]`), or none when the image
    /// was remade to fit, with every row in it already.
    pub fn apply(
        &mut self,
        dev: &Arc<Device>,
        edits: &[TableEdit],
        num_blocks: usize,
    ) -> Result<Vec<i32>> {
        self.host
            .apply(edits, num_blocks)
            .map_err(RuntimeError::BadBatch)?;
        let rows = self.host.n_rows();
        let width = edits
            .iter()
            .map(|e| self.host.row(e.row).len())
            .max()
            .unwrap_or(0);
        if self.image.is_none() || rows > self.rows || width > self.width {
            self.remake(dev, rows, width)?;
            return Ok(Vec::new());
        }
        let mut pairs = Vec::with_capacity(2 * edits.iter().map(|e| e.blocks.len()).sum::<usize>());
        for e in edits {
            let base = self.row_offset(e.row) as usize + e.from;
            for (j, &b) in e.blocks.iter().enumerate() {
                pairs.extend([(base + j) as i32, b as i32]);
            }
        }
        Ok(pairs)
    }

    /// A new image for at least `rows` rows of `width` entries, holding every row.
    fn remake(&mut self, dev: &Arc<Device>, rows: usize, width: usize) -> Result<()> {
        let rows = rows.max(2 * self.rows).max(64).next_power_of_two();
        let width = width.max(self.width).max(64).next_power_of_two();
        let entries = (rows + 1) * width;
        if entries > i32::MAX as usize {
            return Err(RuntimeError::BadBatch(format!(
                "block tables of {rows} rows of {width} blocks do not fit 32-bit offsets"
            )));
        }
        let mut flat = vec![0i32; entries]; // [rows + 1, width]
        for r in 0..self.host.n_rows() {
            let at = (r + 1) * width;
            for (j, &b) in self.host.row(r as u32).iter().enumerate() {
                flat[at + j] = b as i32;
            }
        }
        self.image = None; // the old image goes first (cudaFree waits for passes using it)
        let image = dev.alloc(entries * 4)?;
        dev.upload(&image, 0, as_bytes(&flat))?;
        self.image = Some(image);
        (self.rows, self.width) = (rows, width);
        self.generation = GENERATIONS.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The image's base (entry 0 of the padding row); null before the first pass.
    pub fn base(&self) -> *const i32 {
        self.image
            .as_ref()
            .map_or(std::ptr::null(), |b| b.at::<i32>(0))
    }

    pub fn base_mut(&self) -> *mut i32 {
        self.base().cast_mut()
    }

    /// Where table row `row` starts in the image (entries).
    pub fn row_offset(&self, row: u32) -> i32 {
        ((row as usize + 1) * self.width) as i32
    }
}
