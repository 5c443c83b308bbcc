//! The CPU KV pool: per layer, K and V planes in the layout of [`crate::kv`], stored
//! as f32 or 8-bit (Q8: i8, Fp8: e4m3; one f32 scale per row), plus the block
//! operations (copy, export, import) of the `Backend` trait. An 8-bit K plane stores its rows minus
//! the layer's K offset (one `[head_dim]` vector per kv head, see [`crate::kv`]), and
//! gives them back that way: attention uses `k - c` as is.
//!
//! Planes are allocated with `vec![0; n]`, which maps zeroed pages lazily: untouched
//! blocks cost no RAM. Block operations touch only the blocks they name.

use super::state::StatePool;
use crate::kv::{fp8, q8};
use crate::kv::{BlockTables, KvDtype, KvLayout};
use crate::{Result, RuntimeError};

/// One layer's K or V.
pub enum KvPlane {
    /// [num_blocks, n_kv_heads, block_size, head_dim]
    F32(Vec<f32>),
    /// 8-bit codes with one f32 scale per row: i8 (Q8, stored as its bits) or e4m3 (Fp8).
    Scaled {
        dtype: KvDtype,
        q: Vec<u8>,      // [num_blocks, n_kv_heads, block_size, head_dim]
        scale: Vec<f32>, // [num_blocks, n_kv_heads, block_size]
        /// Subtracted from every row of a head before quantizing (K planes of a model
        /// with a K offset; `None` = zero).  // [n_kv_heads, head_dim]
        offset: Option<Vec<f32>>,
    },
}

/// i8 codes as the bytes a plane stores. SAFETY of the casts: i8 and u8 have one size
/// and alignment, and every bit pattern is valid for both.
fn as_i8(q: &[u8]) -> &[i8] {
    unsafe { std::slice::from_raw_parts(q.as_ptr().cast(), q.len()) }
}
fn as_i8_mut(q: &mut [u8]) -> &mut [i8] {
    unsafe { std::slice::from_raw_parts_mut(q.as_mut_ptr().cast(), q.len()) }
}

impl KvPlane {
    /// A zeroed plane; `offset` ([n_kv_heads, head_dim]) is kept by 8-bit planes only.
    fn zeros(l: &KvLayout, offset: Option<&[f32]>) -> Result<KvPlane> {
        match l.dtype {
            KvDtype::F32 => Ok(KvPlane::F32(vec![0.0; l.layer_elems()])),
            KvDtype::Q8 | KvDtype::Fp8 => Ok(KvPlane::Scaled {
                dtype: l.dtype,
                q: vec![0; l.layer_elems()],
                scale: vec![0.0; l.layer_rows()],
                offset: offset.map(<[f32]>::to_vec),
            }),
            KvDtype::Bf16 => Err(RuntimeError::Kv(
                "the CPU backend stores KV as f32, q8 or fp8, not bf16".into(),
            )),
        }
    }

    /// Writes row `row` (a [`KvLayout::row`] index) of kv head `head` from `x`:
    /// `[head_dim]`. 8-bit planes store `x - offset[head]` when the plane has an offset.
    #[inline]
    pub fn store_row(&mut self, row: usize, head: usize, x: &[f32]) {
        let d = x.len();
        match self {
            KvPlane::F32(v) => v[row * d..(row + 1) * d].copy_from_slice(x),
            KvPlane::Scaled {
                dtype,
                q,
                scale,
                offset,
            } => {
                let q = &mut q[row * d..(row + 1) * d];
                let c = offset.as_deref().map(|c| &c[head * d..(head + 1) * d]);
                scale[row] = match (*dtype, c) {
                    (KvDtype::Fp8, c) => fp8::quantize_row(x, c, q),
                    (_, Some(c)) => q8::quantize_row_minus(x, c, as_i8_mut(q)),
                    (_, None) => q8::quantize_row(x, as_i8_mut(q)),
                };
            }
        }
    }

    /// The first `n` slots of (block, head) as f32: [n, head_dim]. Borrowed from the
    /// plane (F32) or dequantized into `scratch` (8-bit, one exact product per value, so
    /// the values are the same whoever asks; a K plane's rows come back minus its
    /// offset, which attention does not need to undo).
    #[inline(always)]
    pub fn head_rows<'a>(
        &'a self,
        l: &KvLayout,
        block: usize,
        head: usize,
        n: usize,
        scratch: &'a mut Vec<f32>,
    ) -> &'a [f32] {
        let d = l.head_dim;
        let row = l.row(block, head, 0);
        match self {
            KvPlane::F32(v) => &v[row * d..(row + n) * d],
            KvPlane::Scaled {
                dtype, q, scale, ..
            } => {
                scratch.resize(n * d, 0.0);
                let q = &q[row * d..(row + n) * d]; // [n, d]
                for ((o, qr), &s) in scratch
                    .chunks_exact_mut(d)
                    .zip(q.chunks_exact(d))
                    .zip(&scale[row..row + n])
                {
                    match dtype {
                        KvDtype::Fp8 => fp8::dequantize_row(qr, s, o),
                        _ => q8::dequantize_row(as_i8(qr), s, o),
                    }
                }
                &scratch[..n * d]
            }
        }
    }

    /// Bytes of one block of this plane in an export image.
    fn block_image_bytes(l: &KvLayout) -> usize {
        l.block_elems() * l.dtype.bytes() + l.block_rows() * l.dtype.row_scale_bytes()
    }

    fn copy_block(&mut self, l: &KvLayout, src: usize, dst: usize) {
        let (e, r) = (l.block_elems(), l.block_rows());
        match self {
            KvPlane::F32(v) => v.copy_within(src * e..(src + 1) * e, dst * e),
            KvPlane::Scaled { q, scale, .. } => {
                q.copy_within(src * e..(src + 1) * e, dst * e);
                scale.copy_within(src * r..(src + 1) * r, dst * r);
            }
        }
    }

    /// Writes the block's values then scales (8-bit) into `out`: [block_image_bytes].
    fn export_block(&self, l: &KvLayout, block: usize, out: &mut [u8]) {
        let (e, r) = (l.block_elems(), l.block_rows());
        match self {
            KvPlane::F32(v) => put_f32(&v[block * e..(block + 1) * e], out),
            KvPlane::Scaled { q, scale, .. } => {
                let (qo, so) = out.split_at_mut(e);
                qo.copy_from_slice(&q[block * e..(block + 1) * e]);
                put_f32(&scale[block * r..(block + 1) * r], so);
            }
        }
    }

    /// The inverse of [`Self::export_block`]. data: [block_image_bytes]
    fn import_block(&mut self, l: &KvLayout, block: usize, data: &[u8]) {
        let (e, r) = (l.block_elems(), l.block_rows());
        match self {
            KvPlane::F32(v) => get_f32(data, &mut v[block * e..(block + 1) * e]),
            KvPlane::Scaled { q, scale, .. } => {
                let (qd, sd) = data.split_at(e);
                q[block * e..(block + 1) * e].copy_from_slice(qd);
                get_f32(sd, &mut scale[block * r..(block + 1) * r]);
            }
        }
    }
}

/// x: [n] -> out: [4n] little-endian
fn put_f32(x: &[f32], out: &mut [u8]) {
    for (o, v) in out.chunks_exact_mut(4).zip(x) {
        o.copy_from_slice(&v.to_le_bytes());
    }
}

/// data: [4n] little-endian -> x: [n]
fn get_f32(data: &[u8], x: &mut [f32]) {
    for (v, b) in x.iter_mut().zip(data.chunks_exact(4)) {
        *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// The paged KV pool of all attention layers, and the recurrent-state slots of the
/// linear ones (hybrid models).
pub struct CpuKv {
    pub layout: KvLayout,
    pub k: Vec<KvPlane>, // [n_layers]
    pub v: Vec<KvPlane>, // [n_layers]
    pub state: StatePool,
    /// The block tables kept across passes ([`crate::kv::tables`]).
    pub tables: BlockTables,
}

impl CpuKv {
    /// A zeroed pool (lazily mapped) of `layout`'s dtype: F32, Q8 or Fp8. `k_offset`
    /// ([n_layers, n_kv_heads, head_dim], finite) is what 8-bit K rows are stored minus
    /// (see [`crate::Backend::alloc_kv`]); F32 ignores it.
    pub fn new(layout: &KvLayout, k_offset: Option<&[f32]>) -> Result<CpuKv> {
        let per_layer = layout.n_kv_heads * layout.head_dim;
        layout.check_k_offset(k_offset)?;
        let k = (0..layout.n_layers)
            .map(|l| KvPlane::zeros(layout, k_offset.map(|c| &c[l * per_layer..][..per_layer])))
            .collect::<Result<Vec<_>>>()?;
        let v = (0..layout.n_layers)
            .map(|_| KvPlane::zeros(layout, None))
            .collect::<Result<Vec<_>>>()?;
        Ok(CpuKv {
            layout: *layout,
            k,
            v,
            state: StatePool::new(&layout.state),
            tables: BlockTables::default(),
        })
    }

    fn check_block(&self, block: u32, what: &str) -> Result<usize> {
        let n = self.layout.num_blocks;
        if (block as usize) < n {
            Ok(block as usize)
        } else {
            Err(RuntimeError::Kv(format!(
                "{what} block {block} is outside the pool ({n} blocks)"
            )))
        }
    }

    /// Copies block `src` to `dst` in every layer, K and V, scales included.
    pub fn copy_block(&mut self, src: u32, dst: u32) -> Result<()> {
        let src = self.check_block(src, "source")?;
        let dst = self.check_block(dst, "destination")?;
        if src != dst {
            let l = self.layout;
            for p in self.k.iter_mut().chain(self.v.iter_mut()) {
                p.copy_block(&l, src, dst);
            }
        }
        Ok(())
    }

    /// Writes the image of `block` (see [`KvLayout::block_bytes`]) into `out`.
    pub fn export_block(&self, block: u32, out: &mut [u8]) -> Result<()> {
        let b = self.check_block(block, "exported")?;
        let l = self.layout;
        check_len(&l, out.len())?;
        let part = KvPlane::block_image_bytes(&l);
        if part == 0 {
            return Ok(()); // a degenerate layout (no heads or no slots): nothing to write
        }
        let mut parts = out.chunks_exact_mut(part); // [2 * n_layers] of [part]
        for (k, v) in self.k.iter().zip(&self.v) {
            k.export_block(&l, b, parts.next().unwrap());
            v.export_block(&l, b, parts.next().unwrap());
        }
        Ok(())
    }

    /// Overwrites `block` from an image made by [`Self::export_block`].
    pub fn import_block(&mut self, block: u32, data: &[u8]) -> Result<()> {
        let b = self.check_block(block, "imported")?;
        let l = self.layout;
        check_len(&l, data.len())?;
        let part = KvPlane::block_image_bytes(&l);
        if part == 0 {
            return Ok(());
        }
        let mut parts = data.chunks_exact(part); // [2 * n_layers] of [part]
        for (k, v) in self.k.iter_mut().zip(self.v.iter_mut()) {
            k.import_block(&l, b, parts.next().unwrap());
            v.import_block(&l, b, parts.next().unwrap());
        }
        Ok(())
    }
}

impl CpuKv {
    /// [`Self::copy_block`] for each pair in order, once every id is checked.
    pub fn copy_blocks(&mut self, copies: &[(u32, u32)]) -> Result<()> {
        for &(src, dst) in copies {
            self.check_block(src, "source")?;
            self.check_block(dst, "destination")?;
        }
        copies
            .iter()
            .try_for_each(|&(src, dst)| self.copy_block(src, dst))
    }

    /// The images of `blocks`, one after the other, into `out`.
    pub fn export_blocks(&self, blocks: &[u32], out: &mut [u8]) -> Result<()> {
        let one = self.images_len(blocks, out.len())?;
        if one == 0 {
            return Ok(());
        }
        for (&b, chunk) in blocks.iter().zip(out.chunks_exact_mut(one)) {
            self.export_block(b, chunk)?;
        }
        Ok(())
    }

    /// Overwrites `blocks` from their images in `data`, once every id and the length are
    /// checked (nothing is written otherwise).
    pub fn import_blocks(&mut self, blocks: &[u32], data: &[u8]) -> Result<()> {
        let one = self.images_len(blocks, data.len())?;
        if one == 0 {
            return Ok(());
        }
        for (&b, chunk) in blocks.iter().zip(data.chunks_exact(one)) {
            self.import_block(b, chunk)?;
        }
        Ok(())
    }

    /// Checks `blocks` and that `len` holds exactly their images; one image's length.
    fn images_len(&self, blocks: &[u32], len: usize) -> Result<usize> {
        for &b in blocks {
            self.check_block(b, "KV")?;
        }
        let one = self.layout.block_bytes();
        if len != one * blocks.len() {
            return Err(RuntimeError::Kv(format!(
                "{} KV block images are {} bytes, not {len}",
                blocks.len(),
                one * blocks.len()
            )));
        }
        Ok(one)
    }
}

fn check_len(l: &KvLayout, len: usize) -> Result<()> {
    let want = l.block_bytes();
    if len == want {
        Ok(())
    } else {
        Err(RuntimeError::Kv(format!(
            "a {} KV block image is {want} bytes, not {len}",
            l.dtype.name()
        )))
    }
}
