//! The KV block pool: the mechanism under the KV manager.
//!
//! Every block has a reference count. A block whose count drops to zero is not
//! wiped: if it holds cached content (a prefix key) it goes to the tail of an
//! intrusive doubly linked free list (least recently freed at the head), keeping
//! its contents and key, so a later request with the same prefix can take it
//! back (`acquire`) in O(1). A free block without cached content goes to the
//! head, so it is reused before any cached block. `allocate` takes the head of
//! the list, the least recently used block, and forgets its key. All operations
//! are O(1) (`lookup` is a hash-map probe plus a comparison of one block's tokens).

use std::collections::HashMap;

/// Index of a block in the pool (the id the runtime's block tables hold).
pub type BlockId = u32;

const NIL: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct Block {
    ref_count: u32,
    /// Prefix-cache key of the block's content, if it holds a full, hashed block.
    hash: Option<u64>,
    /// Key of the block before it in its sequence (the chain), valid with `hash`.
    parent: u64,
    prev: u32,
    next: u32,
    in_free_list: bool,
}

#[derive(Debug)]
pub struct BlockPool {
    blocks: Vec<Block>,
    head: u32, // least recently freed
    tail: u32, // most recently freed
    n_free: usize,
    /// hash -> block holding that content (referenced or parked in the free list).
    cached: HashMap<u64, BlockId>,
    block_size: usize,
    /// The tokens of every keyed block, compared on lookup.  // [num_blocks * block_size]
    tokens: Vec<u32>,
}

impl BlockPool {
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        assert!(num_blocks < NIL as usize, "too many blocks");
        let mut p = BlockPool {
            blocks: vec![
                Block {
                    ref_count: 0,
                    hash: None,
                    parent: 0,
                    prev: NIL,
                    next: NIL,
                    in_free_list: false
                };
                num_blocks
            ],
            head: NIL,
            tail: NIL,
            n_free: 0,
            cached: HashMap::new(),
            block_size,
            tokens: vec![0; num_blocks * block_size],
        };
        for id in 0..num_blocks as u32 {
            p.push_tail(id);
        }
        p
    }

    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Blocks with no reference (free, possibly still holding cached content).
    pub fn num_free(&self) -> usize {
        self.n_free
    }

    pub fn ref_count(&self, id: BlockId) -> u32 {
        self.blocks[id as usize].ref_count
    }

    /// Takes the least recently used free block (forgetting any cached content); `None` when all are referenced.
    pub fn allocate(&mut self) -> Option<BlockId> {
        self.allocate_evicting().map(|(id, _)| id)
    }

    /// [`Self::allocate`], also returning the key of the cached content it evicted.
    pub fn allocate_evicting(&mut self) -> Option<(BlockId, Option<u64>)> {
        let id = self.head;
        if id == NIL {
            return None;
        }
        self.unlink(id);
        let b = &mut self.blocks[id as usize];
        b.ref_count = 1;
        let evicted = b.hash.take();
        if let Some(h) = evicted {
            self.cached.remove(&h);
        }
        Some((id, evicted))
    }

    /// Adds a reference to `id`; a free block is taken off the free list with its content intact.
    pub fn acquire(&mut self, id: BlockId) {
        if self.blocks[id as usize].in_free_list {
            self.unlink(id);
        }
        self.blocks[id as usize].ref_count += 1;
    }

    /// Drops a reference; at zero a keyed block becomes the most recently freed, an
    /// unkeyed one the next to be allocated.
    pub fn release(&mut self, id: BlockId) {
        let b = &mut self.blocks[id as usize];
        assert!(b.ref_count > 0, "release of a free block {id}");
        b.ref_count -= 1;
        if b.ref_count == 0 {
            if b.hash.is_some() {
                self.push_tail(id);
            } else {
                self.push_head(id);
            }
        }
    }

    /// Records that `id` holds the full block keyed by `hash`, whose chain parent is
    /// `parent` and whose tokens are `tokens` (`block_size` of them). First writer wins:
    /// `false` when the key is already held by another block or `id` already has one.
    pub fn set_hash(&mut self, id: BlockId, hash: u64, parent: u64, tokens: &[u32]) -> bool {
        assert_eq!(tokens.len(), self.block_size, "a keyed block is full");
        if self.cached.contains_key(&hash) || self.blocks[id as usize].hash.is_some() {
            return false;
        }
        let b = &mut self.blocks[id as usize];
        b.hash = Some(hash);
        b.parent = parent;
        let o = id as usize * self.block_size;
        self.tokens[o..o + self.block_size].copy_from_slice(tokens);
        self.cached.insert(hash, id);
        true
    }

    /// The block holding content `hash` (referenced or free), if its parent and tokens
    /// are the ones expected: a 64-bit key collision is never taken for a hit.
    pub fn lookup(&self, hash: u64, parent: u64, tokens: &[u32]) -> Option<BlockId> {
        let id = *self.cached.get(&hash)?;
        let b = &self.blocks[id as usize];
        let o = id as usize * self.block_size;
        (b.parent == parent && self.tokens[o..o + self.block_size] == *tokens).then_some(id)
    }

    /// The key of the content `id` holds, if any.
    pub fn key_of(&self, id: BlockId) -> Option<u64> {
        self.blocks[id as usize].hash
    }

    /// Blocks holding keyed (cached) content, referenced or free.
    pub fn num_cached(&self) -> usize {
        self.cached.len()
    }

    fn push_head(&mut self, id: BlockId) {
        let h = self.head;
        {
            let b = &mut self.blocks[id as usize];
            b.prev = NIL;
            b.next = h;
            b.in_free_list = true;
        }
        if h == NIL {
            self.tail = id;
        } else {
            self.blocks[h as usize].prev = id;
        }
        self.head = id;
        self.n_free += 1;
    }

    fn push_tail(&mut self, id: BlockId) {
        let t = self.tail;
        {
            let b = &mut self.blocks[id as usize];
            b.prev = t;
            b.next = NIL;
            b.in_free_list = true;
        }
        if t == NIL {
            self.head = id;
        } else {
            self.blocks[t as usize].next = id;
        }
        self.tail = id;
        self.n_free += 1;
    }

    fn unlink(&mut self, id: BlockId) {
        let (p, n) = {
            let b = &mut self.blocks[id as usize];
            debug_assert!(b.in_free_list);
            b.in_free_list = false;
            (
                std::mem::replace(&mut b.prev, NIL),
                std::mem::replace(&mut b.next, NIL),
            )
        };
        if p == NIL {
            self.head = n;
        } else {
            self.blocks[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.blocks[n as usize].prev = p;
        }
        self.n_free -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_in_lru_order_and_refcounts() {
        let mut p = BlockPool::new(4, 2);
        assert_eq!(p.num_free(), 4);
        let a: Vec<_> = (0..4).map(|_| p.allocate().unwrap()).collect();
        assert_eq!(a, vec![0, 1, 2, 3]);
        assert_eq!(p.allocate(), None);
        p.set_hash(2, 22, 0, &[1, 2]);
        p.set_hash(0, 20, 0, &[3, 4]);
        p.release(2);
        p.release(0);
        assert_eq!(p.num_free(), 2);
        // least recently freed first
        assert_eq!(p.allocate(), Some(2));
        assert_eq!(p.allocate(), Some(0));
        p.acquire(1);
        assert_eq!(p.ref_count(1), 2);
        p.release(1);
        assert_eq!(p.num_free(), 0);
        p.release(1);
        assert_eq!(p.num_free(), 1);
    }

    #[test]
    fn cached_blocks_survive_until_reused() {
        let mut p = BlockPool::new(3, 2);
        let a = p.allocate().unwrap(); // 0
        let b = p.allocate().unwrap(); // 1
        assert!(p.set_hash(a, 111, 7, &[5, 6]));
        assert!(p.set_hash(b, 222, 111, &[7, 8]));
        p.release(a);
        p.release(b);
        // still findable while free, and only with the right chain and tokens
        assert_eq!(p.lookup(111, 7, &[5, 6]), Some(a));
        assert_eq!(p.lookup(111, 7, &[5, 9]), None);
        assert_eq!(p.lookup(111, 8, &[5, 6]), None);
        // revive b without losing content: it leaves the free list
        p.acquire(b);
        assert_eq!(p.num_free(), 2);
        // allocation takes the untouched block 2 first, then a (LRU), evicting its hash
        assert_eq!(p.allocate(), Some(2));
        assert_eq!(p.allocate(), Some(a));
        assert_eq!(p.lookup(111, 7, &[5, 6]), None);
        assert_eq!(p.lookup(222, 111, &[7, 8]), Some(b));
        assert_eq!(p.allocate(), None);
    }

    #[test]
    fn unkeyed_blocks_are_reused_before_cached_ones() {
        let mut p = BlockPool::new(3, 1);
        let ids: Vec<_> = (0..3).map(|_| p.allocate().unwrap()).collect();
        assert!(p.set_hash(ids[0], 1, 0, &[1]));
        assert!(!p.set_hash(ids[1], 1, 0, &[1]), "first writer wins");
        p.release(ids[0]); // cached: tail
        p.release(ids[1]); // plain: head
        p.release(ids[2]); // plain: head
        assert_eq!(p.allocate(), Some(ids[2]));
        assert_eq!(p.allocate(), Some(ids[1]));
        assert_eq!(p.lookup(1, 0, &[1]), Some(ids[0]));
        assert_eq!(p.allocate(), Some(ids[0]));
        assert_eq!(p.num_cached(), 0);
    }

    #[test]
    #[should_panic(expected = "release of a free block")]
    fn double_release_is_caught() {
        let mut p = BlockPool::new(1, 1);
        p.release(0);
    }
}
