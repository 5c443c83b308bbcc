//! The KV manager's second cache group: running state slots and snapshots of hybrid
//! models (the pool: [`StatePool`]).
//!
//! - A running sequence holds one running slot, taken with its first blocks
//!   (`allocate_slots`, all-or-nothing) and released with them (`free`, `park`).
//! - [`KvManager::snapshot`] copies a running slot into a fresh slot when the sequence
//!   has computed exactly the tokens up to the end of a registered block, keyed by that
//!   block's key: the snapshot shares the block's life (dropped when the block's
//!   content is evicted; held by the owners holding the block: pinned contexts and
//!   parked sessions). A running sequence holds no reference on its snapshots: they
//!   are free, most recently used, from the moment they are taken.
//! - A *tail* snapshot (taken at each block boundary while decoding) replaces the
//!   sequence's previous tail, so a finished turn leaves one at its last boundary
//!   without a slot per block.
//! - Resuming ([`KvManager::share_prefix`]): the cached prefix is cut back to the
//!   deepest snapshot whose blocks are all shared, and that snapshot is copied into
//!   the sequence's running slot.

use super::{KvManager, SeqId, StateCopy, Table};
use crate::kv::key::chain_keys;
use crate::kv::state::{SlotId, StatePool};

impl KvManager {
    /// Whether the model keeps recurrent state (the state group has slots).
    pub fn is_stateful(&self) -> bool {
        self.state.num_slots() > 0
    }

    /// The recurrent-state pool (empty for dense models).
    pub fn state_pool(&self) -> &StatePool {
        &self.state
    }

    /// The running state slot of `seq` (hybrid models, once it holds memory).
    pub fn running_slot(&self, seq: SeqId) -> Option<SlotId> {
        self.tables.get(&seq).and_then(|t| t.running)
    }

    /// Snapshot slots an owner holds references on.
    pub fn owner_snapshots(&self, owner: SeqId) -> &[SlotId] {
        self.tables.get(&owner).map_or(&[], |t| t.snaps.as_slice())
    }

    /// Whether a request of `n_tokens` could possibly be admitted now, even with a
    /// full prefix hit (at most the full blocks before its last token shared): the
    /// cheap check before any hashing.
    pub fn could_admit(&self, n_tokens: usize) -> bool {
        let at_least = self
            .blocks_for(n_tokens + 1)
            .saturating_sub(n_tokens.saturating_sub(1) / self.block_size);
        at_least <= self.pool.num_free() && (!self.is_stateful() || self.state.num_free() > 0)
    }

    /// Gives `seq` a running slot if it has none. `None` (nothing taken) when no slot
    /// is free.
    pub(super) fn ensure_running_slot(&mut self, seq: SeqId) -> Option<SlotId> {
        if let Some(s) = self.running_slot(seq) {
            return Some(s);
        }
        let (slot, _) = self.state.allocate()?;
        self.tables.entry(seq).or_default().running = Some(slot);
        Some(slot)
    }

    /// Releases what a table holds in the state group.
    pub(super) fn release_state(&mut self, t: &Table) {
        if let Some(s) = t.running {
            self.state_copies.retain(|c| c.dst != s);
            self.state.release(s);
        }
        for &s in &t.snaps {
            self.state.release(s);
        }
    }

    /// Makes owner `owner` hold every snapshot along its registered blocks.
    pub(super) fn hold_snapshots(&mut self, owner: SeqId) {
        let Some(t) = self.tables.get(&owner) else {
            return;
        };
        let mut parent = self.root;
        let mut held = Vec::new();
        for &k in &t.keys {
            if let Some(slot) = self.state.lookup(k, parent) {
                held.push(slot);
            }
            parent = k;
        }
        for &s in &held {
            self.state.acquire(s);
        }
        if let Some(t) = self.tables.get_mut(&owner) {
            t.snaps = held;
        }
    }

    /// Cuts `seq`'s freshly shared prefix (`covered` tokens of `tokens`) back to the
    /// deepest snapshot it covers and queues the restore into its running slot.
    /// Returns the tokens kept (0: nothing kept, every shared block released).
    pub(super) fn resume_at_snapshot(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
        covered: usize,
    ) -> usize {
        let bs = self.block_size;
        let full = covered / bs;
        let keys = chain_keys(self.root, &tokens[..full * bs], bs);
        let mut found = None;
        for j in (0..full).rev() {
            let parent = if j == 0 { self.root } else { keys[j - 1] };
            if let Some(slot) = self.state.lookup(keys[j], parent) {
                found = Some((j + 1, slot));
                break;
            }
        }
        let (keep_blocks, snap) = match found {
            Some((n, s)) => (n, Some(s)),
            None => (0, None),
        };
        self.truncate_table(seq, keep_blocks);
        let Some(snap) = snap else {
            return 0;
        };
        // Hold the snapshot while taking the running slot, so that it is not the slot
        // taken.
        self.state.acquire(snap);
        let running = self.ensure_running_slot(seq);
        self.state.release(snap);
        let Some(running) = running else {
            self.truncate_table(seq, 0);
            return 0;
        };
        self.state_copies.push(StateCopy {
            src: snap,
            dst: running,
        });
        keep_blocks * bs
    }

    /// Releases `seq`'s blocks past the first `n` (and their queued copies).
    fn truncate_table(&mut self, seq: SeqId, n: usize) {
        let Some(t) = self.tables.get_mut(&seq) else {
            return;
        };
        if t.blocks.len() <= n {
            return;
        }
        let dropped: Vec<_> = t.blocks.drain(n..).collect();
        t.keys.truncate(n);
        self.copies.retain(|c| !dropped.contains(&c.dst));
        for &b in dropped.iter().rev() {
            self.pool.release(b);
        }
    }

    /// Snapshots `seq`'s running slot, which holds the state after exactly its first
    /// `n_tokens` tokens (a multiple of the block size, those blocks registered): a
    /// copy into a fresh slot keyed by block `n_tokens / block_size - 1`, queued for
    /// [`Self::take_state_copies`]. A `tail` snapshot replaces the previous tail of
    /// `seq`. `false` when nothing was taken (not stateful, not at a registered block
    /// end, already held, or no slot free).
    pub fn snapshot(&mut self, seq: SeqId, n_tokens: usize, tail: bool) -> bool {
        let bs = self.block_size;
        if !self.is_stateful() || n_tokens == 0 || !n_tokens.is_multiple_of(bs) {
            return false;
        }
        let Some(t) = self.tables.get(&seq) else {
            return false;
        };
        let (Some(running), j) = (t.running, n_tokens / bs - 1) else {
            return false;
        };
        let Some(&key) = t.keys.get(j) else {
            return false;
        };
        let parent = if j == 0 { self.root } else { t.keys[j - 1] };
        let previous_tail = t.tail;
        if self.state.lookup(key, parent).is_some() {
            return false;
        }
        let Some((slot, _)) = self.state.allocate() else {
            return false;
        };
        self.state.set_key(slot, key, parent);
        self.state_copies.push(StateCopy {
            src: running,
            dst: slot,
        });
        self.state.release(slot);
        if tail {
            if let Some(old) = previous_tail.filter(|&k| k != key) {
                // Only a free snapshot is dropped: an owner may hold the old one.
                if let Some(s) = self.state.lookup_any(old) {
                    if self.state.ref_count(s) == 0 {
                        self.state.forget(old);
                    }
                }
            }
        }
        if let Some(t) = self.tables.get_mut(&seq) {
            if tail {
                t.tail = Some(key);
            }
        }
        true
    }

    /// State copies queued (restores by `share_prefix`, snapshots by `snapshot`), to
    /// run in order before anything else writes a state slot.
    pub fn take_state_copies(&mut self) -> Vec<StateCopy> {
        std::mem::take(&mut self.state_copies)
    }

    /// A free state slot with one reference (a snapshot loaded from elsewhere, the SSD
    /// tier); the snapshot it held is evicted.
    pub fn fresh_slot(&mut self) -> Option<SlotId> {
        self.state.allocate().map(|(s, _)| s)
    }

    /// Keys a slot whose snapshot was loaded from elsewhere (first writer wins).
    pub fn mark_snapshot(&mut self, slot: SlotId, key: u64, parent: u64) -> bool {
        self.state.set_key(slot, key, parent)
    }

    /// Drops a reference taken by [`Self::fresh_slot`].
    pub fn release_slot(&mut self, slot: SlotId) {
        self.state.release(slot);
    }

    /// The snapshot at the end of the block keyed `key` (chain parent `parent`).
    pub fn snapshot_at(&self, key: u64, parent: u64) -> Option<SlotId> {
        self.state.lookup(key, parent)
    }
}
