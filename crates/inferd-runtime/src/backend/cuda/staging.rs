//! Export and import of fixed-size items (KV blocks, recurrent-state slots) between the
//! device's planes and host memory, in chunks of up to [`STAGING_BYTES`] (at least one item):
//! a kernel of the caller's gathers (scatters) a chunk's pieces into (from) one device
//! image, and one copy moves that image through pinned host memory.

use std::sync::{Arc, Mutex};

use super::device::{Device, DeviceBuffer, PinnedBuffer};
use super::ffi::{self, check};
use super::weight::as_bytes;
use crate::Result;

/// Image bytes staged per chunk of an export or import (at least one item).
pub const STAGING_BYTES: usize = 32 << 20;

/// One chunk on the device, as a gather or scatter kernel takes it.
pub struct Chunk {
    /// The chunk's item ids, on the device.  // i32 [n]
    pub ids: *const i32,
    pub n: usize,
    /// The chunk's images, one after the other.  // [n * item_bytes]
    pub image: *mut std::ffi::c_void,
}

/// The staging buffers of one pool, made at the first use.
pub struct Staging {
    item_bytes: usize,
    /// What the items are, for error messages ("blocks", "state slots").
    what: &'static str,
    buffers: Mutex<Option<Buffers>>,
}

struct Buffers {
    items: usize,
    ids: DeviceBuffer,   // i32 [items]
    image: DeviceBuffer, // [items * item_bytes]
    host: PinnedBuffer,  // [items * item_bytes]
}

impl Staging {
    pub fn new(item_bytes: usize, what: &'static str) -> Staging {
        Staging {
            item_bytes,
            what,
            buffers: Mutex::new(None),
        }
    }

    fn buffers<'a>(
        &self,
        dev: &Arc<Device>,
        b: &'a mut Option<Buffers>,
    ) -> Result<&'a mut Buffers> {
        if b.is_none() {
            let items = (STAGING_BYTES / self.item_bytes.max(1)).max(1);
            *b = Some(Buffers {
                items,
                ids: dev.alloc(items * 4)?,
                image: dev.alloc(items * self.item_bytes)?,
                host: PinnedBuffer::new(items * self.item_bytes)?,
            });
        }
        Ok(b.as_mut().expect("made above"))
    }

    /// The images of `ids`, one after the other, into `out` (its length checked by the
    /// caller): `gather` queues the move of a chunk into its image.
    pub fn export(
        &self,
        dev: &Arc<Device>,
        ids: &[u32],
        out: &mut [u8],
        mut gather: impl FnMut(&Chunk) -> Result<()>,
    ) -> Result<()> {
        let mut guard = self.buffers.lock().unwrap();
        let b = self.buffers(dev, &mut guard)?;
        for (chunk, out) in ids
            .chunks(b.items)
            .zip(out.chunks_mut(b.items * self.item_bytes))
        {
            gather(&self.upload(dev, b, chunk)?)?;
            let what = format!("copying {} to the host", self.what);
            check(
                unsafe { ffi::ifd_copy(b.host.ptr(), b.image.ptr(), out.len(), dev.stream()) },
                &what,
            )?;
            dev.sync()?;
            out.copy_from_slice(b.host.slice(out.len()));
        }
        Ok(())
    }

    /// Overwrites the items `ids` from their images in `data` (its length checked by the
    /// caller): `scatter` queues the move of a chunk out of its image.
    pub fn import(
        &self,
        dev: &Arc<Device>,
        ids: &[u32],
        data: &[u8],
        mut scatter: impl FnMut(&Chunk) -> Result<()>,
    ) -> Result<()> {
        let mut guard = self.buffers.lock().unwrap();
        let b = self.buffers(dev, &mut guard)?;
        for (chunk, data) in ids
            .chunks(b.items)
            .zip(data.chunks(b.items * self.item_bytes))
        {
            // The previous chunk's copy out of the pinned buffer is done (synced below).
            b.host.slice_mut(data.len()).copy_from_slice(data);
            let what = format!("copying {} to the device", self.what);
            check(
                unsafe { ffi::ifd_copy(b.image.ptr(), b.host.ptr(), data.len(), dev.stream()) },
                &what,
            )?;
            scatter(&self.upload(dev, b, chunk)?)?;
            dev.sync()?;
        }
        Ok(())
    }

    /// Puts a chunk's ids on the device (ordered before the kernel that reads them).
    fn upload(&self, dev: &Arc<Device>, b: &Buffers, chunk: &[u32]) -> Result<Chunk> {
        let ids: Vec<i32> = chunk.iter().map(|&i| i as i32).collect();
        dev.upload(&b.ids, 0, as_bytes(&ids))?;
        Ok(Chunk {
            ids: b.ids.at(0),
            n: chunk.len(),
            image: b.image.ptr(),
        })
    }
}
