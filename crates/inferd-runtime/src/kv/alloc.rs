//! A minimal free-list block allocator for single-process drivers (the CLI,
//! tests, benchmarks). The serving engine uses the reference-counted block pool
//! of `inferd-core` instead; both hand out plain block ids.

#[derive(Debug)]
pub struct BlockAllocator {
    free: Vec<u32>,
    block_size: usize,
}

impl BlockAllocator {
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        BlockAllocator {
            free: (0..num_blocks as u32).rev().collect(),
            block_size,
        }
    }

    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// Grows `table` so it covers `n_tokens` positions; `false` (and no change) when the pool is short.
    pub fn ensure(&mut self, table: &mut Vec<u32>, n_tokens: usize) -> bool {
        let need = n_tokens
            .div_ceil(self.block_size)
            .saturating_sub(table.len());
        if need > self.free.len() {
            return false;
        }
        for _ in 0..need {
            table.push(self.free.pop().expect("checked above"));
        }
        true
    }

    pub fn release(&mut self, table: &mut Vec<u32>) {
        self.free.extend(table.drain(..));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_releases() {
        let mut a = BlockAllocator::new(4, 16);
        let mut t = Vec::new();
        assert!(a.ensure(&mut t, 17));
        assert_eq!(t.len(), 2);
        assert!(a.ensure(&mut t, 32));
        assert_eq!(t.len(), 2);
        assert!(!a.ensure(&mut t, 100));
        assert_eq!(t.len(), 2);
        a.release(&mut t);
        assert_eq!(a.free_blocks(), 4);
    }
}
