//! The admission state "waiting for the SSD tier": a request whose session or context
//! holds no KV in memory but has blocks on disk waits here, not in the scheduler, while
//! the reader thread reads them (`spill_read.rs`); every other request runs meanwhile.
//! When the bytes arrive the engine imports them into fresh blocks (a device copy), gives
//! the owner its KV back, and admits every request that waited on it. Requests for an
//! owner already being read join that read. A read that brings nothing back leaves the
//! request to try its next prefix source (a session's context), then to recompute.
//! Blocks of the owner still in memory when the read starts are held by it (a reference
//! each) until the install, so another owner's install cannot evict them meanwhile (the
//! reader skips them: their bytes are nowhere else).

use std::time::Instant;

use inferd_core::kv::{BlockId, SeqId};
use inferd_runtime::Backend;
use tokio::sync::mpsc as tmpsc;

use crate::engine::Engine;
use crate::memory::{by_share, common_prefix, Entry};
use crate::request::{Event, GenRequest};
use crate::spill::{self, block_metas};
use crate::spill_read::{self, ReadDone, ReadJob};

/// A request waiting for its owner's KV to come back from disk.
pub(crate) struct Waiting {
    pub id: u64,
    pub req: GenRequest,
    pub tx: tmpsc::UnboundedSender<Event>,
    /// When it was submitted.
    pub at: Instant,
    /// Owners already read back for it (a second read would find the same).
    pub tried: Vec<SeqId>,
}

/// One owner's read in flight.
pub(crate) struct Load {
    /// Install the blocks for the owner (a session, a pinned context), or leave them in
    /// the prefix cache (an unpinned context).
    hold: bool,
    tokens: Vec<u32>,
    /// Per block of the owner, the one in memory held for the install (not read).
    held: Vec<Option<BlockId>>,
    pub waiting: Vec<Waiting>,
}

impl<B: Backend> Engine<B> {
    /// Admits `w` now, or parks it until its prefix source is read back from disk.
    pub(crate) fn submit_or_wait(&mut self, w: Waiting) {
        if let Some((owner, tokens, hold)) = self.source_on_disk(&w.req, &w.tried) {
            // A snapshot helps the request only inside what its prompt shares with the
            // owner's tokens (less its last token, which is computed for its logits).
            let shared =
                common_prefix(&tokens, &w.req.prompt).min(w.req.prompt.len().saturating_sub(1));
            if self.start_load(owner, tokens, hold, shared) {
                self.loads.get_mut(&owner).unwrap().waiting.push(w);
                return;
            }
        }
        self.admit(w.id, w.req, w.tx, w.at);
    }

    /// The owner `req` would continue when it holds no KV in memory but its first block
    /// is on disk: (owner, tokens, hold). Its session and its context in the order
    /// [`prefix_source`](Self::prefix_source) prefers them (the one sharing more of the
    /// prompt, the session on a tie), one in memory ending the search; one that shares
    /// less than a block of the prompt is never read.
    fn source_on_disk(&self, req: &GenRequest, tried: &[SeqId]) -> Option<(SeqId, Vec<u32>, bool)> {
        let tier = self.spill.as_ref()?;
        let bs = self.kvm.block_size();
        let share = |e: &Entry| common_prefix(&e.tokens, &req.prompt);
        let session = (req.session.as_ref())
            .and_then(|s| self.memory.sessions.get(s))
            .map(|e| (share(e), (e, true)));
        let context = (req.context.as_ref())
            .and_then(|c| self.memory.contexts.get(c))
            .map(|e| (share(e), (e, e.pinned)));
        for (e, hold) in by_share(session, context).into_iter().flatten() {
            if self.kvm.owner_tokens(e.owner).is_some() {
                return None;
            }
            let on_disk = !tried.contains(&e.owner)
                && share(e) >= bs
                && block_metas(self.kvm.root_key(), &e.tokens, bs)
                    .next()
                    .is_some_and(|m| tier.on_disk(m.key) || self.loads.contains_key(&e.owner));
            if on_disk {
                return Some((e.owner, e.tokens.clone(), hold));
            }
        }
        None
    }

    /// Starts reading `owner`'s blocks (or joins the read in flight). `false`: nothing
    /// to read.
    /// `shared`: tokens the asking request shares with the owner's (the snapshot read
    /// back is the deepest inside them).
    fn start_load(&mut self, owner: SeqId, tokens: Vec<u32>, hold: bool, shared: usize) -> bool {
        if self.loads.contains_key(&owner) {
            return true;
        }
        let Some((job, held)) = self.read_job(owner, &tokens, shared) else {
            return false;
        };
        if let Some(tier) = self.spill.as_ref() {
            tier.read(job);
        }
        self.loads.insert(
            owner,
            Load {
                hold,
                tokens,
                held,
                waiting: Vec::new(),
            },
        );
        true
    }

    /// At startup (nothing is served yet): reads `owner`'s blocks on this thread.
    pub(crate) fn load_now(&mut self, owner: SeqId, tokens: &[u32], hold: bool) {
        let Some((job, held)) = self.read_job(owner, tokens, tokens.len()) else {
            return;
        };
        let Some(tier) = self.spill.as_ref() else {
            return;
        };
        let done = spill_read::read(job, &tier.store, tier.snapshots.as_deref());
        let st = tier.store.lock().unwrap_or_else(|e| e.into_inner());
        crate::spill::refresh_view(&tier.view, &st, tier.snapshots.as_deref(), None);
        drop(st);
        self.install_read(done, tokens, hold, held);
    }

    /// What to read for `owner`: its blocks, which of them (and of its snapshots) are
    /// in memory already, and those blocks, held until the install.
    fn read_job(
        &mut self,
        owner: SeqId,
        tokens: &[u32],
        shared: usize,
    ) -> Option<(ReadJob, Vec<Option<BlockId>>)> {
        self.spill.as_ref()?;
        let metas: Vec<_> =
            block_metas(self.kvm.root_key(), tokens, self.kvm.block_size()).collect();
        let bs = self.kvm.block_size();
        let held: Vec<Option<BlockId>> = metas
            .iter()
            .map(|m| {
                (m.tokens.len() == bs)
                    .then(|| self.kvm.claim_cached(m.key, m.parent, &m.tokens))
                    .flatten()
            })
            .collect();
        let resident = held.iter().map(Option::is_some).collect();
        let snaps_resident = self.kvm.is_stateful().then(|| {
            metas
                .iter()
                .filter(|m| m.tokens.len() == bs)
                .map(|m| self.kvm.snapshot_at(m.key, m.parent).is_some())
                .collect()
        });
        let job = ReadJob {
            owner,
            snap_blocks: shared / bs,
            bs,
            metas,
            resident,
            snaps_resident,
            since: Instant::now(),
        };
        Some((job, held))
    }

    /// The reader's bytes arrived: the owner gets its KV, the requests waiting on it go
    /// on (to the scheduler, or to their next prefix source).
    pub(crate) fn finish_load(&mut self, done: ReadDone) {
        let owner = done.owner;
        let Some(load) = self.loads.remove(&owner) else {
            return;
        };
        metrics::histogram!(crate::stats::names::SPILL_READ_SECONDS)
            .record(done.since.elapsed().as_secs_f64());
        // The entry may have been deleted while its blocks were read.
        let registered = self
            .memory
            .contexts
            .values()
            .chain(self.memory.sessions.values())
            .any(|e| e.owner == owner);
        self.install_read(done, &load.tokens, load.hold && registered, load.held);
        for mut w in load.waiting {
            w.tried.push(owner);
            self.submit_or_wait(w);
        }
    }

    /// Imports what was read: blocks that were in memory are those `held` since the
    /// read began, the others fill fresh blocks (the read ends where memory is short); a
    /// hybrid owner is cut back to its deepest snapshot. Then the owner holds them
    /// (`hold`), or they stay in the prefix cache. Held blocks not taken are given back.
    fn install_read(
        &mut self,
        done: ReadDone,
        tokens: &[u32],
        hold: bool,
        mut held: Vec<Option<BlockId>>,
    ) {
        if self.kvm.owner_tokens(done.owner).is_some() {
            self.release_held(held);
            return;
        }
        let bs = self.kvm.block_size();
        let mut blocks: Vec<BlockId> = Vec::new();
        // Read blocks: (their place in `blocks`, their bytes), imported below.
        let mut fresh: Vec<(usize, Vec<u8>)> = Vec::new();
        for (i, (m, data)) in done.metas.iter().zip(done.blocks).enumerate() {
            let id = match data {
                None => match held.get_mut(i).and_then(Option::take) {
                    Some(id) => id,
                    None => break,
                },
                Some(bytes) => {
                    let Some(id) = self.kvm.fresh_block() else {
                        break; // memory is short: the rest is recomputed
                    };
                    fresh.push((blocks.len(), bytes));
                    id
                }
            };
            blocks.push(id);
            if m.tokens.len() < bs {
                break;
            }
        }
        self.release_held(held);
        // Batched imports; where one fails, the blocks from there on are given back.
        let mut end = blocks.len();
        for group in fresh.chunks(spill::batch_blocks(self.bytes_per_block as usize)) {
            let ids: Vec<BlockId> = group.iter().map(|(at, _)| blocks[*at]).collect();
            let mut data = Vec::with_capacity(group.iter().map(|(_, b)| b.len()).sum());
            for (_, b) in group {
                data.extend_from_slice(b);
            }
            if let Err(e) = self.runner.import_blocks(&ids, &data) {
                self.note_fatal(&e);
                eprintln!("inferd: warning: KV spill tier: {e}");
                end = group[0].0;
                break;
            }
        }
        for b in blocks.drain(end..).rev() {
            self.kvm.release_block(b);
        }
        // Only imported blocks join the prefix cache.
        for (at, _) in fresh.iter().filter(|(at, _)| *at < end) {
            let m = &done.metas[*at];
            if m.tokens.len() == bs {
                self.kvm
                    .mark_cached(blocks[*at], m.key, m.parent, &m.tokens);
            }
        }
        let full = done.metas[..blocks.len()]
            .iter()
            .take_while(|m| m.tokens.len() == bs);
        let mut keys: Vec<u64> = full.map(|m| m.key).collect();
        let mut covered: usize = done.metas[..blocks.len()]
            .iter()
            .map(|m| m.tokens.len())
            .sum();
        if self.kvm.is_stateful() {
            if let Some((n, Some(bytes))) = &done.snapshot {
                if let Some(m) = done
                    .metas
                    .get(n.wrapping_sub(1))
                    .filter(|_| *n <= keys.len())
                {
                    self.import_snapshot(m, bytes);
                }
            }
            (blocks, keys, covered) = self.cut_to_snapshot(tokens, blocks, keys);
        }
        if blocks.is_empty() {
            return;
        }
        if hold {
            self.kvm
                .install(done.owner, blocks, keys, tokens[..covered].to_vec());
        } else {
            for b in blocks {
                self.kvm.release_block(b);
            }
        }
    }

    /// Gives back the references of blocks held for an install and not taken.
    fn release_held(&mut self, held: Vec<Option<BlockId>>) {
        for b in held.into_iter().flatten() {
            self.kvm.release_block(b);
        }
    }

    /// A request was cancelled while it waited for the disk.
    /// Drops `id` from the reads it waits on; whether it waited on one.
    pub(crate) fn cancel_waiting(&mut self, id: u64) -> bool {
        let mut found = false;
        for load in self.loads.values_mut() {
            let before = load.waiting.len();
            load.waiting.retain(|w| w.id != id);
            found |= load.waiting.len() < before;
        }
        found
    }
}
