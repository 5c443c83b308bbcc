//! KV accounting per sequence on top of the [`BlockPool`]: which blocks each
//! sequence owns, in position order (its block table). `allocate_slots`
//! returning `None` is the scheduler's signal that memory is short (preempt or
//! wait); it never allocates partially.

use std::collections::HashMap;

use super::pool::{BlockId, BlockPool};

/// Identifies a sequence for the KV manager.
pub type SeqId = u64;

#[derive(Debug)]
pub struct KvManager {
    pool: BlockPool,
    block_size: usize,
    tables: HashMap<SeqId, Vec<BlockId>>,
}

impl KvManager {
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        assert!(block_size > 0);
        KvManager {
            pool: BlockPool::new(num_blocks),
            block_size,
            tables: HashMap::new(),
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Blocks needed to hold `n_tokens`.
    pub fn blocks_for(&self, n_tokens: usize) -> usize {
        n_tokens.div_ceil(self.block_size)
    }

    /// Whether `seq` could grow to `n_tokens` right now.
    pub fn can_fit(&self, seq: SeqId, n_tokens: usize) -> bool {
        let have = self.tables.get(&seq).map_or(0, |t| t.len());
        self.blocks_for(n_tokens).saturating_sub(have) <= self.pool.num_free()
    }

    /// Grows `seq`'s table to cover `n_tokens` positions; returns the new table, or
    /// `None` (with nothing allocated) when the pool is short.
    pub fn allocate_slots(&mut self, seq: SeqId, n_tokens: usize) -> Option<&[BlockId]> {
        if !self.can_fit(seq, n_tokens) {
            return None;
        }
        let need = self.blocks_for(n_tokens);
        let table = self.tables.entry(seq).or_default();
        while table.len() < need {
            table.push(self.pool.allocate().expect("checked by can_fit"));
        }
        Some(table)
    }

    pub fn table(&self, seq: SeqId) -> Option<&[BlockId]> {
        self.tables.get(&seq).map(|t| t.as_slice())
    }

    /// Releases every block of `seq` (e.g. on finish, cancellation or preemption).
    pub fn free(&mut self, seq: SeqId) {
        if let Some(t) = self.tables.remove(&seq) {
            // Last block first, so a sequence's tail is reused before its prefix.
            for &b in t.iter().rev() {
                self.pool.release(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_is_all_or_nothing() {
        let mut m = KvManager::new(4, 16);
        assert_eq!(m.allocate_slots(1, 17).unwrap(), &[0, 1]);
        assert_eq!(m.allocate_slots(1, 32).unwrap(), &[0, 1]);
        assert_eq!(m.allocate_slots(2, 16).unwrap(), &[2]);
        // 3 more blocks needed, 1 free: nothing allocated
        assert!(m.allocate_slots(1, 80).is_none());
        assert_eq!(m.table(1).unwrap(), &[0, 1]);
        assert_eq!(m.pool().num_free(), 1);
        m.free(1);
        assert_eq!(m.pool().num_free(), 3);
        assert!(m.table(1).is_none());
        assert_eq!(m.allocate_slots(3, 48).unwrap().len(), 3);
    }
}
