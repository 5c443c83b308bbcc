//! The SSD tier's side of recurrent-state snapshots (hybrid models): writing the
//! snapshots an owner holds, and cutting a restore back to the deepest snapshot that
//! can resume it (see the module docs of `spill.rs`).

use inferd_core::kv::{BlockId, SlotId};
use inferd_kvstore::BlockMeta;
use inferd_runtime::Backend;

use crate::engine::Engine;
use crate::spill::{block_metas, warn, Job, Kind};

impl<B: Backend> Engine<B> {
    /// Queues the snapshots along `tokens`' full blocks (held in `table`) that are in
    /// memory and not on disk yet; `pin`: written pinned (a pinned context's).
    pub(crate) fn persist_snapshots(&mut self, table: &[BlockId], tokens: &[u32], pin: bool) {
        let bs = self.kvm.block_size();
        let root = self.kvm.root_key();
        let slot_bytes = self.slot_bytes as usize;
        let Some(tier) = self.spill.as_mut() else {
            return;
        };
        if tier.snapshots.is_none() {
            return;
        }
        let metas: Vec<BlockMeta> = block_metas(root, tokens, bs)
            .take(table.len())
            .filter(|m| m.tokens.len() == bs)
            .collect();
        for m in metas {
            if !tier.needs_write(Kind::Snapshot, m.key) {
                continue;
            }
            let Some(slot) = self.kvm.snapshot_at(m.key, m.parent) else {
                continue;
            };
            let mut data = vec![0u8; slot_bytes];
            if let Err(e) = self.runner.export_state_slots(&[slot], &mut data) {
                self.note_fatal(&e);
                warn(e);
                return;
            }
            tier.send(Job::Snapshot(m, data, pin));
        }
    }

    /// The key of the deepest full block of `tokens` whose snapshot is in memory (hybrid
    /// models; `None` without one).
    pub(crate) fn deepest_snapshot(&self, tokens: &[u32]) -> Option<u64> {
        if !self.kvm.is_stateful() {
            return None;
        }
        let (root, bs) = (self.kvm.root_key(), self.kvm.block_size());
        block_metas(root, tokens, bs)
            .filter(|m| m.tokens.len() == bs && self.kvm.snapshot_at(m.key, m.parent).is_some())
            .map(|m| m.key)
            .last()
    }

    /// `blocks` (restored for `tokens`, one reference each) cut back to the deepest
    /// full block whose snapshot is in memory (one read from disk was imported first,
    /// `import_snapshot`); the blocks past it are released. Returns the blocks kept,
    /// their keys and the tokens they cover (0 without a snapshot).
    pub(crate) fn cut_to_snapshot(
        &mut self,
        tokens: &[u32],
        mut blocks: Vec<BlockId>,
        mut keys: Vec<u64>,
    ) -> (Vec<BlockId>, Vec<u64>, usize) {
        let bs = self.kvm.block_size();
        let root = self.kvm.root_key();
        let metas: Vec<BlockMeta> = block_metas(root, tokens, bs).take(keys.len()).collect();
        let mut keep = 0;
        for (j, m) in metas.iter().enumerate().rev() {
            if self.kvm.snapshot_at(m.key, m.parent).is_some() {
                keep = j + 1;
                break;
            }
        }
        for b in blocks.drain(keep..).rev() {
            self.kvm.release_block(b);
        }
        keys.truncate(keep);
        (blocks, keys, keep * bs)
    }

    /// Imports the snapshot ending at block `m` (verified bytes read from disk) into a
    /// free slot and keys it (a cached snapshot, no reference held). `None`: no free
    /// slot, or the import failed.
    pub(crate) fn import_snapshot(&mut self, m: &BlockMeta, data: &[u8]) -> Option<SlotId> {
        let slot = self.kvm.fresh_slot()?;
        if let Err(e) = self.runner.import_state_slots(&[slot], data) {
            self.note_fatal(&e);
            warn(e);
            self.kvm.release_slot(slot);
            return None;
        }
        self.kvm.mark_snapshot(slot, m.key, m.parent);
        self.kvm.release_slot(slot);
        Some(slot)
    }
}
