//! What agent memory holds of the KV budget: the blocks and state snapshots of pinned
//! contexts (and of pinned contexts still being prefilled, reserved from their
//! creation), and of parked sessions. Owners share blocks (agents on one brief share its
//! prefix, a session's turns share theirs), so a block or snapshot counts once however
//! many owners hold it, and a parked session's blocks that a pinned context holds count
//! as pinned only.

use std::collections::{HashMap, HashSet};

use inferd_core::kv::{BlockId, SeqId, SlotId};
use inferd_runtime::Backend;

use crate::engine::Engine;

/// Distinct blocks and snapshots a set of owners holds.
#[derive(Default)]
pub(crate) struct Held {
    pub blocks: HashSet<BlockId>,
    pub snaps: HashSet<SlotId>,
}

/// References the parked sessions hold on each block and snapshot no pinned context
/// holds: releasing a session takes its references back, and what none holds any more
/// stops counting.
struct ParkedRefs {
    blocks: HashMap<BlockId, u32>,
    snaps: HashMap<SlotId, u32>,
}

impl ParkedRefs {
    fn release(&mut self, blocks: &[BlockId], snaps: &[SlotId]) {
        fn drop_ref<K: std::hash::Hash + Eq + Copy>(m: &mut HashMap<K, u32>, k: K) {
            if let Some(n) = m.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&k);
                }
            }
        }
        for &b in blocks {
            drop_ref(&mut self.blocks, b);
        }
        for &s in snaps {
            drop_ref(&mut self.snaps, s);
        }
    }
}

impl<B: Backend> Engine<B> {
    /// What the owners hold (those holding nothing in memory add nothing).
    fn held_by(&self, owners: impl Iterator<Item = SeqId>) -> Held {
        let mut h = Held::default();
        for o in owners {
            h.blocks.extend(self.kvm.table(o).unwrap_or_default());
            h.snaps.extend(self.kvm.owner_snapshots(o));
        }
        h
    }

    /// What pinned contexts hold (an unpinned context holds nothing in memory).
    pub(crate) fn pinned(&self) -> Held {
        self.held_by(self.memory.contexts.values().map(|e| e.owner))
    }

    /// What parked sessions hold that no pinned context holds.
    pub(crate) fn parked(&self, pinned: &Held) -> Held {
        let mut h = self.held_by(self.memory.sessions.values().map(|e| e.owner));
        h.blocks.retain(|b| !pinned.blocks.contains(b));
        h.snaps.retain(|s| !pinned.snaps.contains(s));
        h
    }

    /// Bytes of `blocks` KV blocks and `snaps` state snapshots.
    pub(crate) fn bytes_of(&self, blocks: usize, snaps: usize) -> u64 {
        blocks as u64 * self.bytes_per_block + snaps as u64 * self.slot_bytes
    }

    /// Bytes and snapshots pinned, counting the pinned contexts still being prefilled at
    /// what they will hold (so contexts made together cannot pin past the bound that
    /// each alone was checked against), less the context `replacing` names (a context
    /// made again under its id replaces it when made).
    pub(crate) fn pinned_with_builds(&self, replacing: Option<&str>) -> (u64, usize) {
        let kept = (self.memory.contexts.iter())
            .filter(|(id, _)| Some(id.as_str()) != replacing)
            .map(|(_, e)| e.owner);
        let p = self.held_by(kept);
        let (mut blocks, mut snaps) = (p.blocks.len(), p.snaps.len());
        for seq in self.seqs.values() {
            if seq.build.as_ref().is_some_and(|b| b.pin) {
                blocks += self.kvm.blocks_for(seq.prompt_len + 1);
                snaps += self.snapshots_for(seq.prompt_len);
            }
        }
        (self.bytes_of(blocks, snaps), snaps)
    }

    /// Bytes of the whole KV budget: blocks and state slots.
    pub(crate) fn total_bytes(&self) -> u64 {
        self.bytes_of(
            self.kvm.pool().num_blocks(),
            self.kvm.state_pool().num_slots(),
        )
    }

    /// Snapshots a context of `n` tokens keeps (hybrid models): one per interval and
    /// the one at its end.
    pub(crate) fn snapshots_for(&self, n: usize) -> usize {
        if !self.kvm.is_stateful() {
            return 0;
        }
        n / self.snapshot_interval.max(1) + 1
    }

    /// Parked sessions hold at most the park budget, in bytes and in state slots: the
    /// least recently used are released (their blocks stay in the prefix cache until
    /// reused) until they do.
    pub(crate) fn enforce_park_budget(&mut self) {
        let over = |e: &Self, blocks: usize, snaps: usize| {
            e.bytes_of(blocks, snaps) > e.park_budget_bytes || snaps > e.park_budget_snaps
        };
        let pinned = self.pinned();
        let parked = self.parked(&pinned);
        if !over(self, parked.blocks.len(), parked.snaps.len()) {
            return; // the common case: no counting of references
        }
        let mut refs = ParkedRefs {
            blocks: HashMap::with_capacity(parked.blocks.len()),
            snaps: HashMap::with_capacity(parked.snaps.len()),
        };
        for e in self.memory.sessions.values() {
            for &b in self.kvm.table(e.owner).unwrap_or_default() {
                if !pinned.blocks.contains(&b) {
                    *refs.blocks.entry(b).or_default() += 1;
                }
            }
            for &s in self.kvm.owner_snapshots(e.owner) {
                if !pinned.snaps.contains(&s) {
                    *refs.snaps.entry(s).or_default() += 1;
                }
            }
        }
        while over(self, refs.blocks.len(), refs.snaps.len()) {
            let kvm = &self.kvm;
            let Some(id) = self.memory.lru_session(|o| kvm.table(o).is_some()) else {
                break;
            };
            let owner = self.memory.sessions[&id].owner;
            let blocks = self.kvm.table(owner).unwrap_or_default();
            refs.release(blocks, self.kvm.owner_snapshots(owner));
            self.kvm.free(owner);
        }
    }
}
