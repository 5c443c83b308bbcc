//! The paged KV cache layout, shared by every backend.
//!
//! KV memory is a pool of `num_blocks` blocks of `block_size` token slots. A
//! sequence owns an ordered list of blocks (its *block table*); position `p` of a
//! sequence lives in block `block_table[p / block_size]`, slot `p % block_size`.
//! Blocks are never moved, so sharing a prefix is sharing block ids.
//!
//! Per layer, K and V are each stored as
//! `[num_blocks, n_kv_heads, block_size, head_dim]` (row-major): within a block one
//! head's slots are contiguous, which is what a per-head attention loop streams,
//! on CPU and GPU alike. With the 8-bit dtypes ([`KvDtype::Q8`]: i8, [`KvDtype::Fp8`]:
//! e4m3) each (block, head, slot) row has one f32 scale, per layer and separately for K
//! and V: `[num_blocks, n_kv_heads, block_size]` (see [`q8`] and [`fp8`]). Who owns which block
//! (allocation, reference counts, LRU, prefix hashing) is not decided here: that is
//! the engine's KV manager (`inferd_core::kv`); the runtime only reads and writes
//! through block tables, which a pool keeps across passes ([`tables`]).
//!
//! A block is also the unit of export/import (`Backend::export_blocks`): its byte
//! image is [`KvLayout::block_bytes`] long, in the order documented at
//! [`KvLayout::block_bytes`].
//!
//! # The K offset (Q8 and Fp8)
//!
//! With an 8-bit dtype, a K row of (layer ℓ, kv head h) is stored as
//! `q8(k - c[ℓ][h])`, where `c` is a constant `[head_dim]` vector per (layer, kv head)
//! (`Model::k_offset`, handed to `Backend::alloc_kv`), and attention uses the
//! dequantized `k - c` directly. That is exact (in real arithmetic; f32 rounds the
//! smaller scores differently), not an approximation: for a query q,
//! `q·(k_p - c) = q·k_p - q·c` for every position p, so all of q's scores move by the
//! same `-q·c · scale`, and softmax is invariant to adding a constant to every score
//! (the same holds under the causal mask, which only removes positions). The weights
//! and the output are unchanged; only the quantization error is, since a row's scale
//! is `max|k - c| / 127` instead of `max|k| / 127`.
//!
//! Why: Qwen2's K bias puts a few K channels at ±100–200 in every row while the
//! informative channels are ±0.1–10, so one scale per row makes the small channels
//! coarse. Those channels are RoPE pairs that barely rotate over a context, so the bias
//! there is nearly the same vector at every position; `c` is the K bias averaged over
//! the rotations RoPE gives it at positions `0..max_context` (≈ the bias in slow pairs,
//! ≈ 0 in fast ones; 0 for models without a K bias), which removes it. `c` is a pure
//! function of the weights and config (see `model::kv_offset`), so an exported Q8 block
//! stays valid for the same model. V is stored as it is (no offset: V alone in Q8 costs
//! little), as are F32 K and V.

pub mod fp8;
pub mod q8;
pub mod state;
pub mod tables;

pub use state::StateLayout;
pub use tables::{BlockTables, TableEdit};

/// Element type of stored K/V.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvDtype {
    F32,
    /// bf16 values, the CUDA backend's default (the CPU backend refuses it in `alloc_kv`).
    Bf16,
    /// i8 values with one f32 scale per (token, kv head) row, for K and V separately:
    /// `x ≈ q · scale`, `scale = max|x| / 127` (symmetric, see [`q8`]); K rows are
    /// stored minus the model's K offset (see the module docs).
    Q8,
    /// fp8 e4m3 values with one f32 scale per (token, kv head) row, as Q8 otherwise:
    /// `x ≈ e4m3(x / scale) · scale`, `scale = max|x| / 448` (see [`fp8`]). For the
    /// users of other servers' `fp8` KV; Q8 is the more accurate of the two at the same
    /// bytes (a row's largest value sets the step of both, and i8 has 8 bits of
    /// mantissa where e4m3 has 4).
    Fp8,
}

impl KvDtype {
    /// Bytes of one stored value (without the per-row scale of Q8).
    pub fn bytes(self) -> usize {
        match self {
            KvDtype::F32 => 4,
            KvDtype::Bf16 => 2,
            KvDtype::Q8 | KvDtype::Fp8 => 1,
        }
    }

    /// Bytes of the per-row metadata stored beside each (token, kv head) row of K or V
    /// (Q8: its f32 scale; float types: none).
    pub fn row_scale_bytes(self) -> usize {
        match self {
            KvDtype::Q8 | KvDtype::Fp8 => 4,
            KvDtype::F32 | KvDtype::Bf16 => 0,
        }
    }

    /// Bytes of one (token, kv head) row of K or V of `head_dim` values, scale included.
    pub fn row_bytes(self, head_dim: usize) -> usize {
        head_dim * self.bytes() + self.row_scale_bytes()
    }

    /// Lowercase name (`f32`, `bf16`, `q8`, `fp8`), for logs and file headers.
    pub fn name(self) -> &'static str {
        match self {
            KvDtype::F32 => "f32",
            KvDtype::Bf16 => "bf16",
            KvDtype::Q8 => "q8",
            KvDtype::Fp8 => "fp8",
        }
    }

    /// Whether values are 8-bit codes with a scale per row (Q8, Fp8).
    pub fn is_8bit(self) -> bool {
        matches!(self, KvDtype::Q8 | KvDtype::Fp8)
    }

    /// The dtype a name (as [`Self::name`] writes it, or `int8`) stands for.
    pub fn from_name(name: &str) -> Option<KvDtype> {
        match name {
            "f32" => Some(KvDtype::F32),
            "bf16" => Some(KvDtype::Bf16),
            "q8" | "int8" => Some(KvDtype::Q8),
            "fp8" | "fp8_e4m3" => Some(KvDtype::Fp8),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    pub n_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
    pub num_blocks: usize,
    pub dtype: KvDtype,
    /// The recurrent-state pool allocated beside the blocks (hybrid models; empty for
    /// dense ones). Not part of a block's image.
    pub state: StateLayout,
}

impl KvLayout {
    /// Values of one layer's K (or V): `[num_blocks, n_kv_heads, block_size, head_dim]`.
    pub fn layer_elems(&self) -> usize {
        self.num_blocks * self.n_kv_heads * self.block_size * self.head_dim
    }

    /// Rows (token, kv head) of one layer's K (or V), i.e. Q8 scales per layer and
    /// per K/V: `[num_blocks, n_kv_heads, block_size]`.
    pub fn layer_rows(&self) -> usize {
        self.num_blocks * self.n_kv_heads * self.block_size
    }

    /// Values of one block of one layer's K (or V): `[n_kv_heads, block_size, head_dim]`.
    pub fn block_elems(&self) -> usize {
        self.n_kv_heads * self.block_size * self.head_dim
    }

    /// Rows of one block of one layer's K (or V): `[n_kv_heads, block_size]`.
    pub fn block_rows(&self) -> usize {
        self.n_kv_heads * self.block_size
    }

    /// Bytes of K and V for one token over all layers (Q8 scales included).
    pub fn bytes_per_token(&self) -> usize {
        2 * self.n_layers * self.n_kv_heads * self.dtype.row_bytes(self.head_dim)
    }

    /// Bytes of one block over all layers, K and V, scales included: the size of
    /// [`crate::Backend::export_blocks`]'s image and the unit of a KV memory budget.
    ///
    /// The image is little-endian, with no header, in this order:
    ///
    /// ```text
    /// for layer in 0..n_layers:
    ///     K values  [n_kv_heads, block_size, head_dim]  f32 | bf16 | i8 (Q8) | e4m3 (Fp8); 8-bit: of k - c
    ///     K scales  [n_kv_heads, block_size]            f32, 8-bit dtypes only
    ///     V values  [n_kv_heads, block_size, head_dim]  f32 | bf16 | i8 (Q8) | e4m3 (Fp8)
    ///     V scales  [n_kv_heads, block_size]            f32, 8-bit dtypes only
    /// ```
    ///
    /// Value (h, s, e) is at index `(h * block_size + s) * head_dim + e` of its part,
    /// scale (h, s) at `h * block_size + s`. An image is only meaningful for the same
    /// model (see `Model::identity`; 8-bit K values also depend on the model's K offset,
    /// a function of its weights), dtype, `block_size` and geometry.
    pub fn block_bytes(&self) -> usize {
        self.bytes_per_token() * self.block_size
    }

    /// Bytes of the whole pool.
    pub fn total_bytes(&self) -> usize {
        self.block_bytes() * self.num_blocks
    }

    /// Value offset of (block, head, slot, 0) inside one layer's K or V.
    #[inline]
    pub fn offset(&self, block: usize, head: usize, slot: usize) -> usize {
        self.row(block, head, slot) * self.head_dim
    }

    /// Row index of (block, head, slot) inside one layer's K or V: the offset of its
    /// Q8 scale.
    #[inline]
    pub fn row(&self, block: usize, head: usize, slot: usize) -> usize {
        (block * self.n_kv_heads + head) * self.block_size + slot
    }

    /// Checks a K offset for this layout (`Backend::alloc_kv`'s contract):
    /// `[n_layers, n_kv_heads, head_dim]` finite values, or none.
    pub fn check_k_offset(&self, k_offset: Option<&[f32]>) -> crate::Result<()> {
        let Some(c) = k_offset else { return Ok(()) };
        let want = self.n_layers * self.n_kv_heads * self.head_dim;
        if c.len() != want {
            return Err(crate::RuntimeError::Kv(format!(
                "the K offset has {} values, not n_layers × n_kv_heads × head_dim = {want}",
                c.len()
            )));
        }
        if !c.iter().all(|x| x.is_finite()) {
            return Err(crate::RuntimeError::Kv("the K offset is not finite".into()));
        }
        Ok(())
    }

    /// The largest pool that fits `bytes`.
    pub fn blocks_for_budget(&self, bytes: usize) -> usize {
        bytes / self.block_bytes().max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(dtype: KvDtype) -> KvLayout {
        KvLayout {
            n_layers: 2,
            n_kv_heads: 3,
            head_dim: 4,
            block_size: 5,
            num_blocks: 6,
            dtype,
            state: StateLayout::default(),
        }
    }

    #[test]
    fn offsets_are_dense_and_distinct() {
        let l = layout(KvDtype::F32);
        let mut seen = std::collections::HashSet::new();
        for b in 0..6 {
            for h in 0..3 {
                for s in 0..5 {
                    let o = l.offset(b, h, s);
                    assert!(o + 4 <= l.layer_elems());
                    assert_eq!(o, l.row(b, h, s) * 4);
                    assert!(l.row(b, h, s) < l.layer_rows());
                    assert!(seen.insert(o));
                }
            }
        }
        assert_eq!(seen.len() * 4, l.layer_elems());
        assert_eq!(l.bytes_per_token(), 2 * 2 * 3 * 4 * 4);
        assert_eq!(l.blocks_for_budget(l.total_bytes()), 6);
    }

    #[test]
    fn sizes_count_q8_scales() {
        let f = layout(KvDtype::F32);
        let q = layout(KvDtype::Q8);
        // per token: 2 (K, V) × 2 layers × 3 heads × (4 values + scale)
        assert_eq!(q.bytes_per_token(), 2 * 2 * 3 * (4 + 4));
        assert_eq!(f.block_bytes(), f.bytes_per_token() * 5);
        // one block: per layer, K and V each have block_elems values and block_rows scales
        let per_layer = |l: &KvLayout| {
            2 * (l.block_elems() * l.dtype.bytes() + l.block_rows() * l.dtype.row_scale_bytes())
        };
        assert_eq!(q.block_bytes(), 2 * per_layer(&q));
        assert_eq!(f.block_bytes(), 2 * per_layer(&f));
        assert_eq!(q.total_bytes(), q.block_bytes() * 6);
        assert_eq!(q.blocks_for_budget(q.total_bytes()), 6);
        assert_eq!(q.blocks_for_budget(q.total_bytes() - 1), 5);
    }
}
