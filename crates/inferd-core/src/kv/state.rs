//! The recurrent-state pool: the second cache group beside the paged KV, for hybrid
//! models (mechanism only; the KV manager decides which slot is whose).
//!
//! A slot holds one sequence's recurrent state (every linear layer's conv and
//! delta-rule state; the runtime's `StateLayout`). A slot is either *running* (a
//! sequence computes in it; never keyed) or a *snapshot*: a copy of a running slot
//! taken when its sequence had computed exactly the tokens up to the end of a full
//! block, keyed by that block's prefix key (and its parent's, compared on every hit
//! as for blocks). Slots are reference-counted like blocks: a free snapshot keeps its
//! content and key and sits in a least-recently-freed order until a slot is needed;
//! free unkeyed slots are reused first. `allocate` returns the key it evicted.

use std::collections::{BTreeSet, HashMap};

/// Index of a slot in the pool (the runtime's `SeqChunk::state_slot`).
pub type SlotId = u32;

#[derive(Clone, Debug, Default)]
struct Slot {
    ref_count: u32,
    /// `(key, parent)` of the block at whose end this snapshot was taken.
    key: Option<(u64, u64)>,
    /// Position in the free order while free.
    stamp: u64,
}

#[derive(Debug, Default)]
pub struct StatePool {
    slots: Vec<Slot>,
    /// Free slots: unkeyed (`false`) before keyed, then least recently freed first.
    free: BTreeSet<(bool, u64, SlotId)>,
    clock: u64,
    /// block key -> snapshot slot (referenced or free).
    snapshots: HashMap<u64, SlotId>,
}

impl StatePool {
    /// A pool of `n` slots, all free (0 for a model without recurrent state).
    pub fn new(n: usize) -> Self {
        assert!(n < u32::MAX as usize, "too many state slots");
        let mut p = StatePool {
            slots: vec![Slot::default(); n],
            ..Default::default()
        };
        for id in 0..n as SlotId {
            p.push_free(id);
        }
        p
    }

    pub fn num_slots(&self) -> usize {
        self.slots.len()
    }

    /// Slots with no reference (some still hold snapshots).
    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    /// Snapshots held, referenced or free.
    pub fn num_snapshots(&self) -> usize {
        self.snapshots.len()
    }

    pub fn ref_count(&self, id: SlotId) -> u32 {
        self.slots[id as usize].ref_count
    }

    /// Takes a free slot with one reference: an unkeyed one if any, else the least
    /// recently freed snapshot, whose key is returned (it is forgotten). `None` when
    /// every slot is referenced.
    pub fn allocate(&mut self) -> Option<(SlotId, Option<u64>)> {
        let first = *self.free.iter().next()?;
        self.free.remove(&first);
        let id = first.2;
        let s = &mut self.slots[id as usize];
        s.ref_count = 1;
        let evicted = s.key.take().map(|(k, _)| k);
        if let Some(k) = evicted {
            self.snapshots.remove(&k);
        }
        Some((id, evicted))
    }

    /// Adds a reference; a free snapshot leaves the free order with its content.
    pub fn acquire(&mut self, id: SlotId) {
        let s = &self.slots[id as usize];
        if s.ref_count == 0 {
            let entry = (s.key.is_some(), s.stamp, id);
            self.free.remove(&entry);
        }
        self.slots[id as usize].ref_count += 1;
    }

    /// Drops a reference; at zero a snapshot becomes the most recently freed, an
    /// unkeyed slot the next to be allocated.
    pub fn release(&mut self, id: SlotId) {
        let s = &mut self.slots[id as usize];
        assert!(s.ref_count > 0, "release of a free state slot {id}");
        s.ref_count -= 1;
        if s.ref_count == 0 {
            self.push_free(id);
        }
    }

    /// Records that `id` holds the snapshot at the end of the block keyed `key`
    /// (chain parent `parent`). First writer wins: `false` when the key is already
    /// held or `id` is keyed. Call while `id` is referenced.
    pub fn set_key(&mut self, id: SlotId, key: u64, parent: u64) -> bool {
        let s = &mut self.slots[id as usize];
        if self.snapshots.contains_key(&key) || s.key.is_some() || s.ref_count == 0 {
            return false;
        }
        s.key = Some((key, parent));
        self.snapshots.insert(key, id);
        true
    }

    /// The snapshot at the end of block `key`, if held and its parent is `parent`.
    pub fn lookup(&self, key: u64, parent: u64) -> Option<SlotId> {
        let id = *self.snapshots.get(&key)?;
        (self.slots[id as usize].key == Some((key, parent))).then_some(id)
    }

    /// The slot holding the snapshot keyed `key`, whatever its parent.
    pub fn lookup_any(&self, key: u64) -> Option<SlotId> {
        self.snapshots.get(&key).copied()
    }

    /// The key of the snapshot `id` holds, if any.
    pub fn key_of(&self, id: SlotId) -> Option<u64> {
        self.slots[id as usize].key.map(|(k, _)| k)
    }

    /// Drops the snapshot keyed `key` (its block was evicted, or a newer one replaces
    /// it): the slot keeps its references but no longer answers lookups; a free one is
    /// reused first.
    pub fn forget(&mut self, key: u64) {
        let Some(id) = self.snapshots.remove(&key) else {
            return;
        };
        let s = &self.slots[id as usize];
        let was_free = s.ref_count == 0;
        if was_free {
            let entry = (true, s.stamp, id);
            self.free.remove(&entry);
        }
        self.slots[id as usize].key = None;
        if was_free {
            self.push_free(id);
        }
    }

    fn push_free(&mut self, id: SlotId) {
        self.clock += 1;
        let s = &mut self.slots[id as usize];
        s.stamp = self.clock;
        self.free.insert((s.key.is_some(), s.stamp, id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unkeyed_slots_first_then_least_recent_snapshot() {
        let mut p = StatePool::new(3);
        let a = p.allocate().unwrap().0;
        let b = p.allocate().unwrap().0;
        let c = p.allocate().unwrap().0;
        assert_eq!(p.allocate(), None);
        assert!(p.set_key(a, 10, 1));
        assert!(p.set_key(b, 20, 10));
        assert!(!p.set_key(c, 10, 1), "first writer wins");
        p.release(a); // snapshot, older
        p.release(b); // snapshot, newer
        p.release(c); // unkeyed: reused first
        assert_eq!(p.num_free(), 3);
        assert_eq!(p.lookup(10, 1), Some(a));
        assert_eq!(p.lookup(10, 2), None, "parent compared");
        assert_eq!(p.allocate(), Some((c, None)));
        assert_eq!(p.allocate(), Some((a, Some(10))), "least recently freed");
        assert_eq!(p.lookup(10, 1), None);
        assert_eq!(p.lookup(20, 10), Some(b));
        assert_eq!(p.num_snapshots(), 1);
    }

    #[test]
    fn acquire_keeps_a_free_snapshot_and_forget_unkeys() {
        let mut p = StatePool::new(2);
        let a = p.allocate().unwrap().0;
        assert!(p.set_key(a, 7, 0));
        p.release(a);
        p.acquire(a);
        assert_eq!(p.num_free(), 1);
        assert_eq!(p.lookup(7, 0), Some(a));
        p.release(a);
        p.forget(7);
        assert_eq!(p.lookup(7, 0), None);
        assert_eq!(p.num_free(), 2);
        assert_eq!(p.num_snapshots(), 0);
        // a forgotten free slot is unkeyed: it goes before nothing else keyed
        let (x, ev) = p.allocate().unwrap();
        assert_eq!(ev, None);
        let (y, _) = p.allocate().unwrap();
        assert_ne!(x, y);
        assert!(!p.set_key(x, 9, 0) || p.key_of(x) == Some(9));
    }

    #[test]
    #[should_panic(expected = "release of a free state slot")]
    fn double_release_is_caught() {
        let mut p = StatePool::new(1);
        p.release(0);
    }
}
