//! The paged KV pool on the GPU: per layer one K and one V plane of
//! `[num_blocks, n_kv_heads, block_size, head_dim]` (the layout of [`crate::kv`]), f32,
//! bf16 or 8-bit codes (Q8: i8, Fp8: e4m3); 8-bit planes each have a scale plane
//! `[num_blocks, n_kv_heads, block_size]` f32 beside them, and 8-bit K rows are stored
//! minus the layer's K offset, kept here on the device. A block of one plane is
//! contiguous, so a block's image is two pieces per layer (four for 8-bit: K values,
//! K scales, V values, V scales).
//! Export and import move up to [`super::staging::STAGING_BYTES`] of images at a time:
//! one kernel gathers (scatters) every piece of the chunk's blocks into (from) a device
//! image, and one copy moves it through pinned host memory. A hybrid model's pool also holds its
//! recurrent-state slots ([`super::state`]).

use std::sync::Arc;

use super::device::{Device, DeviceBuffer};
use super::ffi::{self, check, IfdPaged, IfdPieces};
use super::staging::{Chunk, Staging};
use super::state::CudaState;
use super::tables::DeviceTables;
use crate::kv::KvLayout;
use crate::{Result, RuntimeError};

static KV_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One layer's planes: values, and for 8-bit KV their scales.
struct Planes {
    k: DeviceBuffer,
    v: DeviceBuffer,
    /// 8-bit only: [num_blocks, n_kv_heads, block_size] f32 each
    scales: Option<(DeviceBuffer, DeviceBuffer)>,
}

pub struct CudaKv {
    pub(super) layout: KvLayout,
    /// Distinct for every pool (graphs captured over one are valid for it only).
    pub(super) id: u64,
    layers: Vec<Planes>, // [n_layers]
    /// What 8-bit K rows are stored minus (none: zero).  // [n_layers, n_kv_heads, head_dim] f32
    k_offset: Option<DeviceBuffer>,
    /// The planes' addresses as the block kernels read them, in image order.
    /// // [n_layers * pieces] pointers
    planes: DeviceBuffer,
    /// Export/import buffers, made at the first use.
    staging: Staging,
    /// The recurrent-state slots (empty for a dense model).
    pub(super) state: CudaState,
    /// The block tables kept across passes, on the host and the device.
    pub(super) tables: DeviceTables,
}

impl CudaKv {
    /// A zeroed pool; `k_offset` ([n_layers, n_kv_heads, head_dim], checked by the
    /// caller) is kept for 8-bit pools.
    pub fn new(dev: &Arc<Device>, layout: &KvLayout, k_offset: Option<&[f32]>) -> Result<CudaKv> {
        let eight = layout.dtype.is_8bit();
        let bytes = layout.layer_elems() * layout.dtype.bytes();
        let mut layers = Vec::with_capacity(layout.n_layers);
        for _ in 0..layout.n_layers {
            let scales = if eight {
                let b = layout.layer_rows() * 4;
                Some((dev.alloc_zeroed(b)?, dev.alloc_zeroed(b)?))
            } else {
                None
            };
            layers.push(Planes {
                k: dev.alloc_zeroed(bytes)?,
                v: dev.alloc_zeroed(bytes)?,
                scales,
            });
        }
        let ptrs: Vec<u64> = layers
            .iter()
            .flat_map(|p| match &p.scales {
                Some((ks, vs)) => vec![
                    p.k.ptr() as u64,
                    ks.ptr() as u64,
                    p.v.ptr() as u64,
                    vs.ptr() as u64,
                ],
                None => vec![p.k.ptr() as u64, p.v.ptr() as u64],
            })
            .collect();
        let planes = dev.alloc(ptrs.len().max(1) * 8)?;
        if !ptrs.is_empty() {
            dev.upload(&planes, 0, super::weight::as_bytes(&ptrs))?;
        }
        let k_offset = match k_offset {
            Some(c) if eight && !c.is_empty() => {
                let b = dev.alloc(c.len() * 4)?;
                dev.upload(&b, 0, super::weight::as_bytes(c))?;
                Some(b)
            }
            _ => None,
        };
        let state = CudaState::new(dev, &layout.state)?;
        dev.sync()?;
        Ok(CudaKv {
            layout: *layout,
            id: KV_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            layers,
            k_offset,
            planes,
            staging: Staging::new(layout.block_bytes(), "blocks"),
            state,
            tables: DeviceTables::default(),
        })
    }

    /// Layer `layer`'s planes as the kernels take them.
    pub(super) fn paged(&self, layer: usize) -> IfdPaged {
        let p = &self.layers[layer];
        let l = &self.layout;
        let (k_scale, v_scale) = p
            .scales
            .as_ref()
            .map_or((std::ptr::null_mut(), std::ptr::null_mut()), |(k, v)| {
                (k.at::<f32>(0), v.at::<f32>(0))
            });
        let per_layer = l.n_kv_heads * l.head_dim;
        IfdPaged {
            k: p.k.ptr(),
            v: p.v.ptr(),
            dtype: ffi::kv_code(l.dtype),
            n_kv_heads: l.n_kv_heads as i32,
            block_size: l.block_size as i32,
            head_dim: l.head_dim as i32,
            k_scale,
            v_scale,
            k_offset: self.k_offset.as_ref().map_or(std::ptr::null(), |c| {
                c.at::<f32>(layer * per_layer).cast_const()
            }),
        }
    }

    /// A layer's pieces in image order and the bytes of one block of each.
    fn pieces(&self) -> IfdPieces {
        let l = &self.layout;
        let values = l.block_elems() * l.dtype.bytes();
        if l.dtype.is_8bit() {
            let scales = l.block_rows() * 4;
            IfdPieces {
                n: 4,
                bytes: [values, scales, values, scales],
            }
        } else {
            IfdPieces {
                n: 2,
                bytes: [values, values, 0, 0],
            }
        }
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
        let pieces = self.pieces();
        let (vb, sb) = (pieces.bytes[0], pieces.bytes[1]);
        for &(s, d) in copies {
            if s == d {
                continue;
            }
            let (s, d) = (s as usize, d as usize);
            for p in &self.layers {
                dev.copy_within(&p.k, s * vb, &p.k, d * vb, vb)?;
                dev.copy_within(&p.v, s * vb, &p.v, d * vb, vb)?;
                if let Some((ks, vs)) = &p.scales {
                    dev.copy_within(ks, s * sb, ks, d * sb, sb)?;
                    dev.copy_within(vs, s * sb, vs, d * sb, sb)?;
                }
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
        let (layers, n, pieces) = (self.layout.n_layers as i32, c.n as i32, self.pieces());
        let s = dev.stream();
        let code = unsafe {
            if gather {
                ffi::ifd_gather_blocks(planes, layers, pieces, c.ids, n, c.image, s)
            } else {
                ffi::ifd_scatter_blocks(planes, layers, pieces, c.ids, n, c.image, s)
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
