//! The bytes of a model file: a read-only memory map, or an owned buffer for
//! files built in memory (tests, generated fixtures).

use std::fs::File;
use std::ops::Deref;
use std::path::Path;

use memmap2::Mmap;

use crate::{FormatError, Result};

/// Read-only file contents, memory-mapped when they come from disk.
pub(crate) enum FileBytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl FileBytes {
    /// Memory-maps `path` read-only.
    pub(crate) fn map(path: &Path) -> Result<FileBytes> {
        let file = File::open(path).map_err(|e| FormatError::io(path, e))?;
        // SAFETY: the map is read-only. Model files are not expected to be
        // modified while served; a concurrent truncation could fault, which is
        // the accepted trade-off of memory-mapping weights.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| FormatError::io(path, e))?;
        Ok(FileBytes::Mapped(map))
    }
}

impl Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(m) => m,
            FileBytes::Owned(v) => v,
        }
    }
}
