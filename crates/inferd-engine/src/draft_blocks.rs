//! The draft model's KV blocks: free, held by sequences (a count each, a block may be
//! several sequences'), and full blocks of known tokens kept by the hash of every token up
//! to their end, so a sequence whose tokens start like another's (agents on one brief)
//! takes those blocks instead of reading its prompt into the draft again. A cached block
//! no sequence holds stays until its room is wanted, the longest unheld first.
//!
//! A hash names a block's tokens and every token before them (a chain), as the target's
//! prefix cache does. Two prefixes with one 64-bit hash would give the second a wrong
//! draft, which the target's check rejects: never a wrong reply.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

/// The chain hash of a block of `tokens` after the blocks hashed to `prev` (0: the
/// sequence's first block).
pub(crate) fn chain(prev: u64, tokens: &[u32]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    prev.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}

pub(crate) struct DraftBlocks {
    /// Sequences holding each block.  // [num_blocks]
    refs: Vec<u32>,
    /// Blocks neither held nor cached (popped from the end: the lowest first).
    free: Vec<u32>,
    /// Full blocks by their chain hash, and each one's hash.
    by_hash: HashMap<u64, u32>,
    hash_of: HashMap<u32, u64>,
    /// Cached blocks no sequence holds, by when they were let go (oldest first), and
    /// each one's key there.
    unheld: BTreeMap<u64, u32>,
    unheld_at: HashMap<u32, u64>,
    tick: u64,
}

impl DraftBlocks {
    pub fn new(num_blocks: usize) -> Self {
        DraftBlocks {
            refs: vec![0; num_blocks],
            free: (0..num_blocks as u32).rev().collect(),
            by_hash: HashMap::new(),
            hash_of: HashMap::new(),
            unheld: BTreeMap::new(),
            unheld_at: HashMap::new(),
            tick: 0,
        }
    }

    /// Blocks [`DraftBlocks::take`] can give without any sequence letting one go.
    pub fn available(&self) -> usize {
        self.free.len() + self.unheld.len()
    }

    /// Sequences holding `block`.
    pub fn holders(&self, block: u32) -> u32 {
        self.refs[block as usize]
    }

    /// A block for new KV, held once: a free one, else the cached block unheld longest
    /// (no longer cached). `None` when every block is held.
    pub fn take(&mut self) -> Option<u32> {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                let (_, b) = self.unheld.pop_first()?;
                self.unheld_at.remove(&b);
                let h = self.hash_of.remove(&b).expect("an unheld block is cached");
                self.by_hash.remove(&h);
                b
            }
        };
        self.refs[b as usize] = 1;
        Some(b)
    }

    /// The cached block of chain hash `hash`, held once more.
    pub fn hold_cached(&mut self, hash: u64) -> Option<u32> {
        let b = *self.by_hash.get(&hash)?;
        if let Some(at) = self.unheld_at.remove(&b) {
            self.unheld.remove(&at);
        }
        self.refs[b as usize] += 1;
        Some(b)
    }

    /// Keeps held `block`, whose KV is that of the tokens `hash` names, for later
    /// sequences. A hash already cached keeps its block (this one stays uncached).
    pub fn cache(&mut self, block: u32, hash: u64) {
        debug_assert!(self.refs[block as usize] > 0, "only a held block is cached");
        if self.by_hash.contains_key(&hash) || self.hash_of.contains_key(&block) {
            return;
        }
        self.by_hash.insert(hash, block);
        self.hash_of.insert(block, hash);
    }

    /// One holder of `block` lets it go: unheld, it is free, or cached until its room is
    /// wanted.
    pub fn release(&mut self, block: u32) {
        let r = &mut self.refs[block as usize];
        debug_assert!(*r > 0, "block {block} released more often than held");
        *r = r.saturating_sub(1);
        if *r > 0 {
            return;
        }
        if self.hash_of.contains_key(&block) {
            self.tick += 1;
            self.unheld.insert(self.tick, block);
            self.unheld_at.insert(block, self.tick);
        } else {
            self.free.push(block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_blocks_stay_cached_until_their_room_is_wanted() {
        let mut b = DraftBlocks::new(3);
        let (x, y) = (b.take().unwrap(), b.take().unwrap());
        assert_eq!((x, y), (0, 1), "the lowest free blocks first");
        let (hx, hy) = (chain(0, &[1, 2]), chain(chain(0, &[1, 2]), &[3, 4]));
        assert_ne!(hx, chain(0, &[2, 1]), "order counts");
        assert_ne!(hy, chain(0, &[3, 4]), "so does what came before");
        b.cache(x, hx);
        b.cache(y, hy);
        // A second sequence takes both; the first lets them go: still held.
        assert_eq!(b.hold_cached(hx), Some(x));
        assert_eq!(b.hold_cached(hy), Some(y));
        assert_eq!(b.hold_cached(chain(0, &[9, 9])), None);
        b.release(x);
        b.release(y);
        assert_eq!((b.holders(x), b.available()), (1, 1));
        // Unheld, they stay cached, and are given out last, the longest unheld first.
        b.release(y);
        b.release(x);
        assert_eq!(b.available(), 3);
        assert_eq!(b.take(), Some(2), "the free block first");
        assert_eq!(b.take(), Some(y), "then y, unheld before x");
        assert_eq!(b.hold_cached(hy), None, "no longer cached");
        assert_eq!(b.hold_cached(hx), Some(x), "x still is");
        assert_eq!((b.available(), b.take()), (0, None));
        // A hash cached twice keeps its first block; the other is freed when let go.
        b.release(y);
        let z = b.take().unwrap();
        b.cache(z, hx);
        b.release(z);
        assert_eq!(b.available(), 1);
        assert_eq!(b.hold_cached(hx), Some(x));
    }
}
