//! The paged KV pool on the GPU: per layer one K and one V plane of
//! `[num_blocks, n_kv_heads, block_size, head_dim]` (the layout of [`crate::kv`]), f32 or
//! bf16. A block of one plane is contiguous, so a block's image is two pieces per layer.
//! Export and import move up to [`super::staging::STAGING_BYTES`] of images at a time:
//! one kernel gathers (scatters) every piece of the chunk's blocks into (from) a device
//! image, and one copy moves it through pinned host memory. A hybrid model's pool also holds its
//! recurrent-state slots ([`super::state`]).

use std::sync::Arc;

use super::device::{Device, DeviceBuffer};
use super::ffi::{self, check, IfdPaged};
use super::staging::{Chunk, Staging};
use super::state::CudaState;
use crate::kv::{KvDtype, KvLayout};
use crate::{Result, RuntimeError};

static KV_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub struct CudaKv {
    pub(super) layout: KvLayout,
    /// Distinct for every pool (graphs captured over one are valid for it only).
    pub(super) id: u64,
    k: Vec<DeviceBuffer>, // per layer
    v: Vec<DeviceBuffer>, // per layer
    /// The planes' addresses as the block kernels read them.  // [n_layers * 2] pointers
    planes: DeviceBuffer,
    /// Export/import buffers, made at the first use.
    staging: Staging,
    /// The recurrent-state slots (empty for a dense model).
    pub(super) state: CudaState,
}

impl CudaKv {
    pub fn new(dev: &Arc<Device>, layout: &KvLayout) -> Result<CudaKv> {
        match layout.dtype {
            KvDtype::F32 | KvDtype::Bf16 => {}
            d => {
                return Err(RuntimeError::Kv(format!(
                    "the CUDA backend stores KV as bf16 or f32, not {}",
                    d.name()
                )))
            }
        }
        let bytes = layout.layer_elems() * layout.dtype.bytes();
        let mut k = Vec::with_capacity(layout.n_layers);
        let mut v = Vec::with_capacity(layout.n_layers);
        for _ in 0..layout.n_layers {
            k.push(dev.alloc_zeroed(bytes)?);
            v.push(dev.alloc_zeroed(bytes)?);
        }
        let ptrs: Vec<u64> = k
            .iter()
            .zip(&v)
            .flat_map(|(k, v)| [k.ptr() as u64, v.ptr() as u64])
            .collect();
        let planes = dev.alloc(ptrs.len() * 8)?;
        if !ptrs.is_empty() {
            dev.upload(&planes, 0, super::weight::as_bytes(&ptrs))?;
        }
        let state = CudaState::new(dev, &layout.state)?;
        dev.sync()?;
        Ok(CudaKv {
            layout: *layout,
            id: KV_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            k,
            v,
            planes,
            staging: Staging::new(layout.block_bytes(), "blocks"),
            state,
        })
    }

    /// Layer `layer`'s planes as the kernels take them.
    pub(super) fn paged(&self, layer: usize) -> IfdPaged {
        IfdPaged {
            k: self.k[layer].ptr(),
            v: self.v[layer].ptr(),
            kv_bf16: (self.layout.dtype == KvDtype::Bf16) as i32,
            n_kv_heads: self.layout.n_kv_heads as i32,
            block_size: self.layout.block_size as i32,
            head_dim: self.layout.head_dim as i32,
        }
    }

    /// Bytes of one block of one plane.
    fn plane_block_bytes(&self) -> usize {
        self.layout.block_elems() * self.layout.dtype.bytes()
    }

    fn check_ids(&self, ids: impl Iterator<Item = u32>) -> Result<()> {
        for b in ids {
            if b as usize >= self.layout.num_blocks {
                return Err(RuntimeError::Kv(format!(
                    "block {b} outside the pool of {}",
                    self.layout.num_blocks
                )));
            }
        }
        Ok(())
    }

    pub fn copy_blocks(&mut self, dev: &Device, copies: &[(u32, u32)]) -> Result<()> {
        self.check_ids(copies.iter().flat_map(|&(s, d)| [s, d]))?;
        let pb = self.plane_block_bytes();
        for &(s, d) in copies {
            if s == d {
                continue;
            }
            let (s, d) = (s as usize * pb, d as usize * pb);
            for l in 0..self.layout.n_layers {
                dev.copy_within(&self.k[l], s, &self.k[l], d, pb)?;
                dev.copy_within(&self.v[l], s, &self.v[l], d, pb)?;
            }
        }
        Ok(())
    }

    pub fn export_blocks(&self, dev: &Arc<Device>, blocks: &[u32], out: &mut [u8]) -> Result<()> {
        self.check_image(blocks, out.len())?;
        self.staging
            .export(dev, blocks, out, |c| self.move_blocks(dev, c, true))
    }

    pub fn import_blocks(&mut self, dev: &Arc<Device>, blocks: &[u32], data: &[u8]) -> Result<()> {
        self.check_image(blocks, data.len())?;
        self.staging
            .import(dev, blocks, data, |c| self.move_blocks(dev, c, false))
    }

    /// Queues the move of a chunk's blocks from the planes into its image (`gather`) or
    /// back.
    fn move_blocks(&self, dev: &Device, c: &Chunk, gather: bool) -> Result<()> {
        let planes = self.planes.ptr() as *const *mut std::ffi::c_void;
        let (layers, n, pb) = (
            self.layout.n_layers as i32,
            c.n as i32,
            self.plane_block_bytes(),
        );
        let s = dev.stream();
        let code = unsafe {
            if gather {
                ffi::ifd_gather_blocks(planes, layers, c.ids, n, pb, c.image, s)
            } else {
                ffi::ifd_scatter_blocks(planes, layers, c.ids, n, pb, c.image, s)
            }
        };
        check(code, "moving blocks")
    }

    fn check_image(&self, blocks: &[u32], len: usize) -> Result<()> {
        self.check_ids(blocks.iter().copied())?;
        let want = blocks.len() * self.layout.block_bytes();
        if len != want {
            return Err(RuntimeError::Kv(format!(
                "a block image of {len} bytes for {} blocks ({want} expected)",
                blocks.len()
            )));
        }
        Ok(())
    }
}
