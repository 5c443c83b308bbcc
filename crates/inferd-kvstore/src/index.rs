//! The in-memory index of stored blocks: metadata, file sizes, pins, and the
//! least-recently-used order of the unpinned blocks (a tick per access; the
//! oldest tick is evicted first). Pure bookkeeping, no IO.

use std::collections::{BTreeMap, HashMap};

use crate::block_file::BlockMeta;

#[derive(Debug)]
struct Entry {
    meta: BlockMeta,
    file_len: u64,
    pinned: bool,
    tick: u64,
}

/// Blocks by key, with byte accounting and LRU order.
#[derive(Debug, Default)]
pub(crate) struct Index {
    entries: HashMap<u64, Entry>,
    /// Unpinned blocks by last access tick (pinned blocks are not in here).
    lru: BTreeMap<u64, u64>,
    next_tick: u64,
    used: u64,
    pinned_bytes: u64,
}

impl Index {
    fn tick(&mut self) -> u64 {
        self.next_tick += 1;
        self.next_tick
    }

    /// Adds (or replaces) a block as the most recently used, unpinned.
    pub(crate) fn insert(&mut self, meta: BlockMeta, file_len: u64) {
        let key = meta.key;
        self.remove(key);
        let tick = self.tick();
        self.lru.insert(tick, key);
        self.used += file_len;
        self.entries.insert(
            key,
            Entry {
                meta,
                file_len,
                pinned: false,
                tick,
            },
        );
    }

    /// Removes a block; returns its file size if it was present.
    pub(crate) fn remove(&mut self, key: u64) -> Option<u64> {
        let e = self.entries.remove(&key)?;
        self.used -= e.file_len;
        if e.pinned {
            self.pinned_bytes -= e.file_len;
        } else {
            self.lru.remove(&e.tick);
        }
        Some(e.file_len)
    }

    /// Marks a block as just used.
    pub(crate) fn touch(&mut self, key: u64) {
        let tick = self.tick();
        if let Some(e) = self.entries.get_mut(&key) {
            if !e.pinned {
                self.lru.remove(&e.tick);
                self.lru.insert(tick, key);
            }
            e.tick = tick;
        }
    }

    /// Pins or unpins a block; unknown keys are ignored. An unpinned block
    /// keeps its place in the LRU order from its last access.
    pub(crate) fn set_pinned(&mut self, key: u64, pinned: bool) {
        let Some(e) = self.entries.get_mut(&key) else {
            return;
        };
        if e.pinned == pinned {
            return;
        }
        e.pinned = pinned;
        if pinned {
            self.lru.remove(&e.tick);
            self.pinned_bytes += e.file_len;
        } else {
            self.lru.insert(e.tick, key);
            self.pinned_bytes -= e.file_len;
        }
    }

    /// The least recently used unpinned block that `may_go` lets go.
    pub(crate) fn oldest_unpinned(&self, may_go: impl Fn(u64) -> bool) -> Option<u64> {
        self.lru.values().copied().find(|&k| may_go(k))
    }

    pub(crate) fn contains(&self, key: u64) -> bool {
        self.entries.contains_key(&key)
    }

    pub(crate) fn meta(&self, key: u64) -> Option<&BlockMeta> {
        self.entries.get(&key).map(|e| &e.meta)
    }

    pub(crate) fn is_pinned(&self, key: u64) -> bool {
        self.entries.get(&key).is_some_and(|e| e.pinned)
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries.keys().copied()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes of all indexed block files.
    pub(crate) fn used(&self) -> u64 {
        self.used
    }

    /// Bytes of pinned block files.
    pub(crate) fn pinned_bytes(&self) -> u64 {
        self.pinned_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(key: u64) -> BlockMeta {
        BlockMeta {
            key,
            parent: 0,
            tokens: vec![],
        }
    }

    #[test]
    fn lru_order_follows_touches_and_skips_pins() {
        let mut ix = Index::default();
        for k in 1..=3 {
            ix.insert(meta(k), 10);
        }
        assert_eq!(ix.used(), 30);
        assert_eq!(ix.oldest_unpinned(|_| true), Some(1));
        ix.touch(1);
        assert_eq!(ix.oldest_unpinned(|_| true), Some(2));
        ix.set_pinned(2, true);
        assert_eq!(ix.oldest_unpinned(|_| true), Some(3));
        assert_eq!(ix.pinned_bytes(), 10);
        ix.set_pinned(2, false);
        assert_eq!(ix.oldest_unpinned(|_| true), Some(2));
        assert_eq!(ix.remove(2), Some(10));
        assert_eq!(ix.remove(2), None);
        assert_eq!((ix.used(), ix.pinned_bytes(), ix.len()), (20, 0, 2));
        // Touching a pinned block refreshes its place for when it is unpinned.
        ix.set_pinned(3, true);
        ix.touch(3);
        ix.set_pinned(3, false);
        assert_eq!(ix.oldest_unpinned(|_| true), Some(1));
    }
}
