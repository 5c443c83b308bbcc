//! The engine's agent-memory operations: creating, finding and dropping contexts,
//! parking sessions after a turn, choosing a request's prefix source, relieving
//! memory pressure by releasing the least recently used parked session, and the
//! cache report. Policy lives in [`crate::memory`]; block mechanics in
//! `inferd_core::kv::KvManager`.

use inferd_core::kv::SeqId;
use inferd_core::sched::Request;
use inferd_runtime::Backend;
use tokio::sync::mpsc as tmpsc;

use crate::engine::Engine;
use crate::handle::Reply;
use crate::memory::{
    by_share, common_prefix, unix_now, CacheReport, ContextInfo, ContextSpec, Entry, MemoryError,
    SessionInfo,
};
use crate::request::GenRequest;
use crate::seq::{Build, Seq};
use crate::spill;

/// A context's metadata may take this many bytes a token ([`MAX_META_BASE_BYTES`] more):
/// the messages and rendered text of a real conversation take 10-20.
pub(crate) const MAX_META_BYTES_PER_TOKEN: usize = 64;
/// See [`MAX_META_BYTES_PER_TOKEN`].
pub(crate) const MAX_META_BASE_BYTES: usize = 64 << 10;

impl<B: Backend> Engine<B> {
    /// The owner a new request continues, among its session and its context those that
    /// hold KV in memory (one on disk was read back first: `load.rs`): the one whose
    /// tokens share more of the prompt, the session on a tie (a session whose history
    /// began with another context gives way to the context the prompt starts with).
    pub(crate) fn prefix_source(&mut self, req: &GenRequest) -> Option<SeqId> {
        self.tick += 1;
        let tick = self.tick;
        let session = req
            .session
            .as_ref()
            .and_then(|s| self.memory.sessions.get_mut(s))
            .map(|e| {
                e.last_used = unix_now();
                e.tick = tick;
                e.owner
            });
        let context = req
            .context
            .as_ref()
            .and_then(|c| self.memory.contexts.get_mut(c))
            .map(|e| {
                e.tick = tick; // a context in use is not the least recently used
                e.owner
            });
        let shared = |owner: Option<SeqId>| {
            let owner = owner?;
            let tokens = self.kvm.owner_tokens(owner)?;
            Some((common_prefix(tokens, &req.prompt), owner))
        };
        let [first, then] = by_share(shared(session), shared(context));
        first.or(then)
    }

    /// Makes a context (prefilled by the steps to come; [`Self::finish_build`] answers).
    pub(crate) fn create_context(&mut self, spec: ContextSpec, reply: Reply<ContextInfo>) {
        let n = spec.tokens.len();
        if n == 0 {
            let _ = reply.send(Err(MemoryError::Invalid("the context is empty".into())));
            return;
        }
        if n >= self.max_context {
            let _ = reply.send(Err(MemoryError::TooLarge(format!(
                "the context has {n} tokens; the longest sequence this server holds is {} tokens",
                self.max_context - 1
            ))));
            return;
        }
        // The metadata (the server's messages and text) lives in memory and on disk as
        // long as the context: it may not outweigh what its tokens can need.
        let meta_cap = MAX_META_BYTES_PER_TOKEN * n + MAX_META_BASE_BYTES;
        if spec.meta.len() > meta_cap {
            let _ = reply.send(Err(MemoryError::Invalid(format!(
                "the context's messages take {} bytes, more than its {n} tokens can need (at \
                 most {MAX_META_BYTES_PER_TOKEN} bytes a token and {} KiB: {meta_cap}); message \
                 fields the chat template does not render count too",
                spec.meta.len(),
                MAX_META_BASE_BYTES >> 10
            ))));
            return;
        }
        if spec.pin {
            let pinned = self.pinned_with_builds(spec.id.as_deref());
            if let Err(why) = self.check_pin(n, pinned) {
                let _ = reply.send(Err(MemoryError::TooLarge(why)));
                return;
            }
        }
        if let Some(id) = &spec.id {
            if let Err(e) = crate::memory::check_id("a context id", id) {
                let _ = reply.send(Err(MemoryError::Invalid(e)));
                return;
            }
        }
        let id = spec
            .id
            .clone()
            .unwrap_or_else(|| self.memory.fresh_context_id());
        let seq_id = self.memory.new_owner();
        let (tx, _rx) = tmpsc::unbounded_channel();
        let state = self.sched.add(Request {
            id: seq_id,
            prompt_len: n,
            priority: i32::MAX / 2,
            reuse_prefix: true,
            prefix_source: None,
            // (A build ends with its prefill: it never decodes.)
            token_limit: None,
        });
        let mut seq = Seq::new(
            GenRequest::greedy(spec.tokens.clone(), 1),
            self.tokenizer.clone(),
            self.max_context,
            tx,
            state,
            std::time::Instant::now(),
        );
        seq.build = Some(Build {
            id,
            pin: spec.pin,
            meta: spec.meta,
            reply,
        });
        self.seqs.insert(seq_id, seq);
    }

    /// Pinned memory never comes back, so a context must leave room to run requests: at
    /// most half of the budget's bytes, and of its state slots, may be pinned. `Ok` with
    /// the bytes and snapshots pinning `n` more tokens takes, beside `already` pinned.
    pub(crate) fn check_pin(
        &self,
        n: usize,
        already: (u64, usize),
    ) -> Result<(u64, usize), String> {
        let (pinned, pinned_snaps) = already;
        let total = self.total_bytes();
        let need_blocks = self.kvm.blocks_for(n + 1);
        let need_snaps = self.snapshots_for(n);
        let need = need_blocks as u64 * self.bytes_per_block + need_snaps as u64 * self.slot_bytes;
        let slots = self.kvm.state_pool().num_slots();
        if pinned + need > total / 2 {
            return Err(format!(
                "pinning {n} more tokens ({need_blocks} KV blocks, {need_snaps} state snapshots: \
                 {need} bytes) would pin {} of the {total} bytes of the KV budget; at most half \
                 may be pinned (raise --kv-memory or unpin contexts)",
                pinned + need
            ));
        }
        if (pinned_snaps + need_snaps) * 2 > slots {
            return Err(format!(
                "pinning {n} more tokens would pin {} of the {slots} recurrent-state slots \
                 ({need_snaps} snapshots: one per --snapshot-interval tokens and one at the \
                 end); at most half may be pinned (raise --kv-memory or --state-fraction, or \
                 unpin contexts)",
                pinned_snaps + need_snaps
            ));
        }
        Ok((need, need_snaps))
    }

    /// A context's prefill is done: keep its KV under the context's owner (pinned) or
    /// leave it in the prefix cache (unpinned), and answer the caller.
    pub(crate) fn finish_build(&mut self, seq_id: SeqId) {
        let Some(mut seq) = self.seqs.remove(&seq_id) else {
            return;
        };
        self.row_ended(seq_id);
        let Some(b) = seq.build.take() else {
            return;
        };
        let tokens = seq.tokens[..seq.prompt_len].to_vec();
        let replaced = self.memory.contexts.remove(&b.id);
        if let Some(old) = &replaced {
            self.kvm.free(old.owner);
            self.unpin_on_disk(old);
            self.memory.short.remove(&b.id);
            // Its record goes before its blocks do: a new record that cannot be written
            // leaves none, not the old one without its blocks.
            if let Some(t) = self.spill.as_mut() {
                t.remove_record(spill::CONTEXT, &b.id);
            }
        }
        let owner = self.memory.new_owner();
        self.kvm.park(seq_id, owner, tokens.clone());
        self.sched.finish(seq_id, &mut self.kvm);
        let now = unix_now();
        self.tick += 1;
        let e = Entry {
            owner,
            tokens,
            pinned: b.pin,
            created: now,
            last_used: now,
            tick: self.tick,
            meta: b.meta,
            turn: 0,
        };
        let from = self.spill.as_ref().map(|t| t.mark());
        self.persist(spill::CONTEXT, &b.id, owner, &e);
        if !b.pin {
            // Unpinned: its blocks go back to the prefix cache.
            self.kvm.free(owner);
        }
        self.memory.contexts.insert(b.id.clone(), e);
        if let Some(old) = replaced {
            self.drop_on_disk(&old.tokens); // after the new one is in: what it shares stays
        }
        self.enforce_record_budget();
        if let Some(why) = self.lost() {
            // Its writes to the SSD tier saw the device lost: nothing of it will outlive
            // this process, so it is not reported made.
            let _ = b.reply.send(Err(MemoryError::DeviceLost(why)));
            return;
        }
        let mut info = self.context_info(&b.id, true).expect("just inserted");
        let (root, bs) = (self.kvm.root_key(), self.kvm.block_size());
        // Hybrid models: a restore resumes from the deepest snapshot on disk, so the one
        // the context ends at must be there too.
        let snap = self.deepest_snapshot(&info.tokens);
        let (Some(tier), Some(from)) = (self.spill.as_mut(), from) else {
            let _ = b.reply.send(Ok(info));
            return;
        };
        // Answered once its writes are done, with what reached the disk.
        let view = tier.view_handle();
        tier.after_writes(
            from,
            Box::new(move |ok| {
                info.spilled_blocks = spill::count_on_disk(&view, root, &info.tokens, bs);
                // Every write succeeded and every block is there (none evicted since), and
                // the deepest snapshot.
                let ok = ok
                    && info.spilled_blocks == info.tokens.len().div_ceil(bs)
                    && snap.is_none_or(|k| spill::snapshot_on_disk(&view, k));
                info.persisted = Some(ok);
                if !ok {
                    spill::warn(format!(
                        "context '{}' is not all on disk (a write failed, as warned): after a \
                         restart it comes back shorter, or not at all",
                        info.id
                    ));
                }
                let _ = b.reply.send(Ok(info));
            }),
        );
    }

    /// Answers `reply` with `r` once what it reports is on disk (the SSD tier's writes
    /// queued so far are done; at once without the tier), so that an acknowledged change
    /// survives a kill right after it. The engine thread does not wait.
    pub(crate) fn answer_after_writes<T: Send + 'static>(
        &mut self,
        reply: Reply<T>,
        r: Result<T, MemoryError>,
    ) {
        match self.spill.as_mut() {
            Some(tier) => tier.after_writes(
                tier.mark(),
                Box::new(move |_| {
                    let _ = reply.send(r);
                }),
            ),
            None => {
                let _ = reply.send(r);
            }
        }
    }

    /// Pinned contexts read back from disk shorter than they are (a block not written,
    /// or found damaged) take back the blocks a request computed for them, once it ends
    /// (keyed in the prefix cache), and write them to the SSD tier, so they are whole
    /// again (up to their last full block) in memory and on disk. Dense models only: a
    /// hybrid model's context also needs its state at the end.
    pub(crate) fn top_up(&mut self) {
        if self.memory.short.is_empty() || self.kvm.is_stateful() || self.is_lost() {
            return;
        }
        let bs = self.kvm.block_size();
        let ids: Vec<String> = self.memory.short.iter().cloned().collect();
        for id in ids {
            let Some(e) = self.memory.contexts.get(&id).filter(|e| e.pinned).cloned() else {
                self.memory.short.remove(&id);
                continue;
            };
            let have = self.kvm.owner_tokens(e.owner).map_or(0, |t| t.len());
            let full = e.tokens.len() / bs * bs;
            let now = self.kvm.extend_from_cache(e.owner, &e.tokens[..full]);
            if now >= full {
                self.memory.short.remove(&id);
            }
            if now > have {
                self.persist(spill::CONTEXT, &id, e.owner, &e);
            }
        }
    }

    /// A context as callers see it; `whole`: with its tokens and metadata (a report
    /// leaves them out).
    pub(crate) fn context_info(&self, id: &str, whole: bool) -> Option<ContextInfo> {
        let e = self.memory.contexts.get(id)?;
        Some(ContextInfo {
            id: id.to_string(),
            n_tokens: e.tokens.len(),
            tokens: if whole { e.tokens.clone() } else { Vec::new() },
            pinned: e.pinned,
            created: e.created,
            meta: if whole { e.meta.clone() } else { String::new() },
            resident_tokens: self.kvm.owner_tokens(e.owner).map_or(0, |t| t.len()),
            resident_blocks: self.kvm.table(e.owner).map_or(0, |t| t.len()),
            spilled_blocks: self.spilled_blocks(&e.tokens),
            persisted: None,
        })
    }

    /// Blocks of `tokens` in the SSD tier.
    fn spilled_blocks(&self, tokens: &[u32]) -> usize {
        self.spill.as_ref().map_or(0, |t| {
            t.count_blocks(self.kvm.root_key(), tokens, self.kvm.block_size())
        })
    }

    /// Drops a context, and cancels a context of this id still being made (its maker
    /// is told it was deleted), so a context deleted while it is made never appears.
    pub(crate) fn delete_context(&mut self, id: &str) -> Result<(), MemoryError> {
        let builds: Vec<SeqId> = (self.seqs.iter())
            .filter(|(_, s)| s.build.as_ref().is_some_and(|b| b.id == id))
            .map(|(&k, _)| k)
            .collect();
        for seq in &builds {
            if let Some(b) = self.seqs.get_mut(seq).and_then(|s| s.build.take()) {
                let _ = b.reply.send(Err(MemoryError::Deleted(format!(
                    "the context '{id}' was deleted while it was being made"
                ))));
            }
            self.remove(*seq);
        }
        match self.forget(spill::CONTEXT, id) {
            Err(MemoryError::NotFound(_)) if !builds.is_empty() => Ok(()),
            r => r,
        }
    }

    /// Drops a session, and the session of its turns still running or waiting: they
    /// end parking nothing, so a deleted session stays deleted (the Responses API deletes
    /// the session of a first turn that was never stored, while it may still run).
    pub(crate) fn delete_session(&mut self, id: &str) -> Result<(), MemoryError> {
        let mut detached = false;
        let in_flight = self.seqs.values_mut().map(|s| &mut s.session);
        let waiting = self
            .loads
            .values_mut()
            .flat_map(|l| l.waiting.iter_mut().map(|w| &mut w.req.session));
        for session in in_flight.chain(waiting) {
            if session.as_deref() == Some(id) {
                *session = None;
                detached = true;
            }
        }
        match self.forget(spill::SESSION, id) {
            Err(MemoryError::NotFound(_)) if detached => Ok(()),
            r => r,
        }
    }

    /// Drops a named context or session: its blocks (they stay in the prefix cache in
    /// memory until reused), its record on disk, and its block and snapshot files there
    /// that no other context or session holds.
    fn forget(&mut self, kind: &'static str, id: &str) -> Result<(), MemoryError> {
        let map = if kind == spill::CONTEXT {
            &mut self.memory.contexts
        } else {
            &mut self.memory.sessions
        };
        let e = map
            .remove(id)
            .ok_or_else(|| MemoryError::NotFound(format!("no {kind} with id '{id}'")))?;
        self.kvm.free(e.owner);
        if kind == spill::CONTEXT {
            self.unpin_on_disk(&e);
            self.memory.short.remove(id);
        }
        if let Some(t) = self.spill.as_mut() {
            t.remove_record(kind, id);
        }
        self.drop_on_disk(&e.tokens);
        Ok(())
    }

    /// A turn with a session ended: park its computed KV (prompt and reply) under the
    /// session, replacing the previous turn's. `seen`: its tokens the client got (the
    /// prompt and the reply up to where it ended for the client).
    pub(crate) fn park_session(&mut self, seq_id: SeqId, seen: usize) {
        let Some(seq) = self.seqs.get(&seq_id) else {
            return;
        };
        let Some(sid) = seq.parks_under().map(str::to_string) else {
            return;
        };
        // The last token the client got was never fed back (or not for this turn): its
        // KV is not the turn's. A stop string can end a reply while its sequence is being
        // recomputed after preemption: only tokens whose KV is computed are parked, and
        // nothing when it holds none (the previous turn's stay parked).
        let computed = seen
            .min(seq.tokens.len())
            .saturating_sub(1)
            .min(seq.sched.num_computed());
        if computed == 0 {
            return;
        }
        let tokens = seq.tokens[..computed].to_vec();
        let owner = match self.memory.sessions.get(&sid) {
            Some(e) => e.owner,
            None => self.memory.new_owner(),
        };
        self.kvm.park(seq_id, owner, tokens.clone());
        self.tick += 1;
        let now = unix_now();
        let e = self
            .memory
            .sessions
            .entry(sid.clone())
            .or_insert_with(|| Entry {
                owner,
                tokens: Vec::new(),
                pinned: false,
                created: now,
                last_used: now,
                tick: 0,
                meta: String::new(),
                turn: 0,
            });
        let before = std::mem::replace(&mut e.tokens, tokens);
        e.turn = seq_id;
        e.last_used = now;
        e.tick = self.tick;
        let e = e.clone();
        self.persist(spill::SESSION, &sid, owner, &e);
        // What the previous turn wrote past where this one goes (its partial last block,
        // a branch of an edited history) is its only.
        self.drop_on_disk(&before);
        self.enforce_park_budget();
        self.enforce_record_budget();
    }

    /// A parked turn's reply ended earlier for the client than where the engine parked
    /// it (a stop string found by the output side): the session keeps the tokens the
    /// client got (`seen`: prompt and reply), less the last, and nothing past them.
    /// Only the turn of request `turn` is trimmed: a later turn parked since is kept.
    pub(crate) fn trim_session(&mut self, sid: &str, turn: u64, seen: usize) {
        let keep = seen.saturating_sub(1);
        let Some(e) = self.memory.sessions.get_mut(sid).filter(|e| e.turn == turn) else {
            return;
        };
        if e.tokens.len() <= keep {
            return;
        }
        let before = e.tokens.clone();
        e.tokens.truncate(keep);
        let e = e.clone();
        if self.kvm.owner_tokens(e.owner).is_some() {
            // Re-parked onto itself: blocks past `keep` tokens go back to the pool.
            self.kvm.park(e.owner, e.owner, e.tokens.clone());
        }
        self.persist(spill::SESSION, sid, e.owner, &e);
        self.drop_on_disk(&before);
    }

    /// Releases the least recently used parked session's blocks (they stay in the prefix
    /// cache until reused). `false` when none is parked.
    pub(crate) fn release_lru_session(&mut self) -> bool {
        let kvm = &self.kvm;
        let Some(id) = self.memory.lru_session(|o| kvm.table(o).is_some()) else {
            return false;
        };
        let owner = self.memory.sessions[&id].owner;
        self.kvm.free(owner);
        true
    }

    /// Records that hold no KV in memory (sessions released, unpinned contexts) keep at
    /// most `record_tokens` token ids in all, their metadata counted in token ids' worth
    /// of bytes ([`Entry::record_weight`]): past it the least recently used are
    /// forgotten, on disk too. What the prefix cache holds of them stays.
    pub(crate) fn enforce_record_budget(&mut self) {
        // (An owner being read back from disk is not idle: its files are in use.)
        let idle = |e: &Entry| {
            !e.pinned && self.kvm.table(e.owner).is_none() && !self.loads.contains_key(&e.owner)
        };
        let records = || {
            let sessions = self.memory.sessions.iter().map(|r| (spill::SESSION, r));
            let contexts = self.memory.contexts.iter().map(|r| (spill::CONTEXT, r));
            sessions.chain(contexts).filter(|(_, (_, e))| idle(e))
        };
        let mut total: usize = records().map(|(_, (_, e))| e.record_weight()).sum();
        if total <= self.record_tokens {
            return;
        }
        let mut lru: Vec<(u64, &'static str, String, usize)> = records()
            .map(|(kind, (id, e))| (e.tick, kind, id.clone(), e.record_weight()))
            .collect();
        lru.sort_unstable();
        for (_, kind, id, n) in lru {
            if total <= self.record_tokens {
                break;
            }
            let _ = self.forget(kind, &id);
            total -= n;
        }
    }

    pub(crate) fn cache_report(&self) -> CacheReport {
        let pool = self.kvm.pool();
        let contexts: Vec<ContextInfo> = {
            let mut ids: Vec<&String> = self.memory.contexts.keys().collect();
            ids.sort();
            ids.into_iter()
                .filter_map(|id| self.context_info(id, false))
                .collect()
        };
        let mut sessions: Vec<SessionInfo> = self
            .memory
            .sessions
            .iter()
            .map(|(id, e)| SessionInfo {
                id: id.clone(),
                tokens: e.tokens.len(),
                resident_tokens: self.kvm.owner_tokens(e.owner).map_or(0, |t| t.len()),
                resident_blocks: self.kvm.table(e.owner).map_or(0, |t| t.len()),
                spilled_blocks: self.spilled_blocks(&e.tokens),
                last_used: e.last_used,
            })
            .collect();
        sessions.sort_by(|a, b| a.id.cmp(&b.id));
        let pinned = self.pinned();
        let parked = self.parked(&pinned);
        let (blocks_pinned, blocks_parked) = (pinned.blocks.len(), parked.blocks.len());
        let used = pool.num_blocks() - pool.num_free();
        let state = self.kvm.state_pool();
        let spilled_snaps = self.spill.as_ref().map_or((0, 0), |t| t.snapshot_usage());
        let spilled_blocks = self.spill.as_ref().map_or((0, 0), |t| t.block_usage());
        CacheReport {
            bytes_per_snapshot: self.slot_bytes,
            state_slots_total: state.num_slots(),
            state_slots_free: state.num_free(),
            snapshots: state.num_snapshots(),
            snapshot_bytes: state.num_snapshots() as u64 * self.slot_bytes,
            snapshots_pinned: pinned.snaps.len(),
            snapshots_parked: parked.snaps.len(),
            snapshots_spilled: spilled_snaps.0,
            spill_write_errors: self.spill.as_ref().map_or(0, |t| t.failed_writes()),
            snapshot_bytes_spilled: spilled_snaps.1,
            block_size: self.kvm.block_size(),
            bytes_per_block: self.bytes_per_block,
            kv_dtype: self.kv_dtype_name.to_string(),
            blocks_total: pool.num_blocks(),
            blocks_free: pool.num_free(),
            blocks_cached: pool.num_cached(),
            blocks_pinned,
            blocks_parked,
            blocks_running: used.saturating_sub(blocks_pinned + blocks_parked),
            blocks_spilled: spilled_blocks.0,
            bytes_spilled: spilled_blocks.1,
            contexts,
            sessions,
        }
    }
}
