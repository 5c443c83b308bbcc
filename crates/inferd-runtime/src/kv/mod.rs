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
//! on CPU and GPU alike. Who owns which block (allocation, reference counts, LRU,
//! prefix hashing) is not decided here: that is the engine's KV manager
//! (`inferd_core::kv`); the runtime only reads and writes through block tables.

/// Element type of stored K/V.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvDtype {
    F32,
    F16,
}

impl KvDtype {
    pub fn bytes(self) -> usize {
        match self {
            KvDtype::F32 => 4,
            KvDtype::F16 => 2,
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
}

impl KvLayout {
    /// Elements of one layer's K (or V): `[num_blocks, n_kv_heads, block_size, head_dim]`.
    pub fn layer_elems(&self) -> usize {
        self.num_blocks * self.n_kv_heads * self.block_size * self.head_dim
    }

    /// Bytes of K and V for one token over all layers.
    pub fn bytes_per_token(&self) -> usize {
        2 * self.n_layers * self.n_kv_heads * self.head_dim * self.dtype.bytes()
    }

    /// Bytes of the whole pool.
    pub fn total_bytes(&self) -> usize {
        self.bytes_per_token() * self.block_size * self.num_blocks
    }

    /// Element offset of (block, head, slot, 0) inside one layer's K or V.
    #[inline]
    pub fn offset(&self, block: usize, head: usize, slot: usize) -> usize {
        ((block * self.n_kv_heads + head) * self.block_size + slot) * self.head_dim
    }

    /// The largest pool that fits `bytes`.
    pub fn blocks_for_budget(&self, bytes: usize) -> usize {
        bytes / (self.bytes_per_token() * self.block_size).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_dense_and_distinct() {
        let l = KvLayout {
            n_layers: 2,
            n_kv_heads: 3,
            head_dim: 4,
            block_size: 5,
            num_blocks: 6,
            dtype: KvDtype::F32,
        };
        let mut seen = std::collections::HashSet::new();
        for b in 0..6 {
            for h in 0..3 {
                for s in 0..5 {
                    let o = l.offset(b, h, s);
                    assert!(o + 4 <= l.layer_elems());
                    assert!(seen.insert(o));
                }
            }
        }
        assert_eq!(seen.len() * 4, l.layer_elems());
        assert_eq!(l.bytes_per_token(), 2 * 2 * 3 * 4 * 4);
        assert_eq!(l.blocks_for_budget(l.total_bytes()), 6);
    }
}
