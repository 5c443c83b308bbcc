//! The recurrent-state slots of hybrid models on the GPU, beside the KV blocks: per linear
//! layer a conv plane `[slots, conv_kernel - 1, conv_dim]` and a delta plane `[slots,
//! n_v_heads, k_head_dim, v_head_dim]`, f32 (the layout of [`crate::kv::state`]). A slot's
//! export image is the CPU's, byte for byte (little-endian f32, per layer conv then delta),
//! so a slot exported on one backend imports on the other.
//!
//! Copies run as one kernel per wave of independent pairs (usually one for the whole list);
//! export and import move up to [`super::staging::STAGING_BYTES`] (at least one slot) at a
//! time: one kernel gathers (scatters) the slots' pieces into (from) a device image, one copy
//! moves it through pinned host memory.

use std::sync::{Arc, Mutex};

use super::device::{Device, DeviceBuffer};
use super::ffi::{self, check};
use super::staging::{Chunk, Staging};
use super::weight::as_bytes;
use crate::kv::StateLayout;
use crate::{Result, RuntimeError};

pub struct CudaState {
    pub(super) layout: StateLayout,
    conv: Vec<DeviceBuffer>,  // per layer f32 [slots, conv_elems]
    delta: Vec<DeviceBuffer>, // per layer f32 [slots, delta_elems]
    /// The planes' addresses as the slot kernels read them.  // [n_layers * 2] pointers
    planes: DeviceBuffer,
    /// Slot ids of a copy or a move, on the device (grown to the longest list).
    ids: Mutex<Option<DeviceBuffer>>, // i32 [capacity]
    /// Export/import buffers, made at the first use.
    staging: Staging,
}

impl CudaState {
    /// A zeroed pool of `layout` (no buffers for a dense model's empty layout).
    pub fn new(dev: &Arc<Device>, layout: &StateLayout) -> Result<CudaState> {
        let mut conv = Vec::with_capacity(layout.n_layers);
        let mut delta = Vec::with_capacity(layout.n_layers);
        for _ in 0..layout.n_layers {
            conv.push(dev.alloc_zeroed(layout.slots * layout.conv_elems * 4)?);
            delta.push(dev.alloc_zeroed(layout.slots * layout.delta_elems * 4)?);
        }
        let ptrs: Vec<u64> = conv
            .iter()
            .zip(&delta)
            .flat_map(|(c, d)| [c.ptr() as u64, d.ptr() as u64])
            .collect();
        let planes = dev.alloc(ptrs.len() * 8)?;
        if !ptrs.is_empty() {
            dev.upload(&planes, 0, as_bytes(&ptrs))?;
        }
        dev.sync()?;
        Ok(CudaState {
            layout: *layout,
            conv,
            delta,
            planes,
            ids: Mutex::new(None),
            staging: Staging::new(layout.slot_bytes(), "state slots"),
        })
    }

    /// Layer `layer`'s conv plane.  // f32 [slots, conv_kernel - 1, conv_dim]
    pub(super) fn conv(&self, layer: usize) -> Result<*mut f32> {
        self.check_layer(layer)?;
        Ok(self.conv[layer].at(0))
    }

    /// Layer `layer`'s delta plane.  // f32 [slots, n_v_heads, k_head_dim, v_head_dim]
    pub(super) fn delta(&self, layer: usize) -> Result<*mut f32> {
        self.check_layer(layer)?;
        Ok(self.delta[layer].at(0))
    }

    fn check_layer(&self, layer: usize) -> Result<()> {
        if layer >= self.layout.n_layers {
            return Err(RuntimeError::Kv(format!(
                "state layer {layer} of a pool with {} linear layers",
                self.layout.n_layers
            )));
        }
        Ok(())
    }

    /// `ids` on the device (the buffer grown to fit; the stream orders the upload after
    /// any kernel still reading the previous list).
    fn upload_ids(&self, dev: &Arc<Device>, ids: &[i32]) -> Result<*const i32> {
        let mut guard = self.ids.lock().unwrap();
        if guard.as_ref().is_none_or(|b| b.bytes() < ids.len() * 4) {
            *guard = Some(dev.alloc(ids.len().next_power_of_two().max(256) * 4)?);
        }
        let buf = guard.as_ref().unwrap();
        dev.upload(buf, 0, as_bytes(ids))?;
        Ok(buf.at(0))
    }

    fn planes(&self) -> *const *mut f32 {
        self.planes.ptr() as *const *mut f32
    }

    /// Copies slot `src` over `dst` for each pair in order, once every id is checked.
    pub fn copy_slots(&mut self, dev: &Arc<Device>, copies: &[(u32, u32)]) -> Result<()> {
        for &(src, dst) in copies {
            self.layout.check_slot(src, "source")?;
            self.layout.check_slot(dst, "destination")?;
        }
        let copies: Vec<(u32, u32)> = copies.iter().copied().filter(|(s, d)| s != d).collect();
        if copies.is_empty() || self.layout.n_layers == 0 {
            return Ok(());
        }
        let pairs: Vec<i32> = copies
            .iter()
            .flat_map(|&(s, d)| [s as i32, d as i32])
            .collect();
        let base = self.upload_ids(dev, &pairs)?;
        let l = &self.layout;
        for (from, to) in waves(&copies) {
            // SAFETY: the wave's pairs lie inside the uploaded list.
            let p = unsafe { base.add(2 * from) };
            check(
                unsafe {
                    ffi::ifd_copy_state_slots(
                        self.planes(),
                        l.n_layers as i32,
                        l.conv_elems,
                        l.delta_elems,
                        p,
                        (to - from) as i32,
                        dev.stream(),
                    )
                },
                "copying state slots",
            )?;
        }
        Ok(())
    }

    /// The images of `slots`, one after the other, into `out`.
    pub fn export_slots(&self, dev: &Arc<Device>, slots: &[u32], out: &mut [u8]) -> Result<()> {
        if self.layout.check_images(slots, out.len())? == 0 {
            return Ok(());
        }
        self.staging
            .export(dev, slots, out, |c| self.move_slots(dev, c, true))
    }

    /// Overwrites `slots` from their images in `data` (nothing is written unless every
    /// id and the length check).
    pub fn import_slots(&mut self, dev: &Arc<Device>, slots: &[u32], data: &[u8]) -> Result<()> {
        if self.layout.check_images(slots, data.len())? == 0 {
            return Ok(());
        }
        self.staging
            .import(dev, slots, data, |c| self.move_slots(dev, c, false))
    }

    /// Queues the move of a chunk's slots into its image (`gather`) or back.
    fn move_slots(&self, dev: &Arc<Device>, c: &Chunk, gather: bool) -> Result<()> {
        let l = &self.layout;
        let (layers, n, img, s) = (
            l.n_layers as i32,
            c.n as i32,
            c.image.cast::<f32>(),
            dev.stream(),
        );
        let (conv, delta) = (l.conv_elems, l.delta_elems);
        let code = unsafe {
            if gather {
                ffi::ifd_gather_state_slots(self.planes(), layers, conv, delta, c.ids, n, img, s)
            } else {
                ffi::ifd_scatter_state_slots(self.planes(), layers, conv, delta, c.ids, n, img, s)
            }
        };
        check(code, "moving state slots")
    }
}

/// Cuts `copies` into waves `[from, to)` of independent pairs, in order: a pair joins the
/// current wave unless it reads a slot the wave writes, or writes one the wave reads or
/// writes (then the order of the two matters, and a new wave starts).
fn waves(copies: &[(u32, u32)]) -> Vec<(usize, usize)> {
    use std::collections::HashSet;
    let mut out = Vec::new();
    let (mut from, mut reads, mut writes) = (0, HashSet::new(), HashSet::new());
    for (i, &(s, d)) in copies.iter().enumerate() {
        if writes.contains(&s) || writes.contains(&d) || reads.contains(&d) {
            out.push((from, i));
            from = i;
            reads.clear();
            writes.clear();
        }
        reads.insert(s);
        writes.insert(d);
    }
    if from < copies.len() {
        out.push((from, copies.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::waves;

    #[test]
    fn waves_keep_dependent_copies_in_order() {
        // Independent pairs: one wave.
        assert_eq!(waves(&[(0, 1), (2, 3), (4, 5)]), vec![(0, 3)]);
        // 1 is written, then read: two waves; 5 written twice: a third.
        assert_eq!(
            waves(&[(0, 1), (1, 2), (3, 5), (4, 5)]),
            vec![(0, 1), (1, 3), (3, 4)]
        );
        // A slot read, then overwritten: the read goes first.
        assert_eq!(waves(&[(7, 8), (9, 7)]), vec![(0, 1), (1, 2)]);
        assert!(waves(&[]).is_empty());
    }
}
