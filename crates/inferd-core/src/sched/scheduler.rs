//! See the module docs of [`crate::sched`].

use std::cmp::Reverse;
use std::collections::HashMap;

use super::snapshot_points::{SnapshotKind, SnapshotPoints};
use crate::kv::{KvManager, SeqId};

#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Tokens per forward pass, decodes and prefill chunks together.
    pub max_batch_tokens: usize,
    /// Of those, at most this many prefill tokens per step when no sequence is decoding.
    pub max_prefill_tokens: usize,
    /// Prefill tokens per step while sequences are decoding (at most `max_prefill_tokens`):
    /// smaller, so a long prompt arriving adds little to the running agents' inter-token time.
    pub max_prefill_tokens_decoding: usize,
    /// Whether a pass's decode rows count against `max_prefill_tokens_decoding`, so a pass
    /// with a full prompt slice has exactly that many rows, decodes included (a GPU's
    /// products run in tiles of 64-256 rows). Off by default, also on a GPU: there it made
    /// the prefill-bound fleets finish about 1% later (prompts split across more passes
    /// cost more than the tile row saves under the power cap; docs/gpu-notes.md session 32).
    pub decodes_in_prefill_slice: bool,
    /// While sequences are decoding, a prefill slice of `n` tokens starting at position `p`
    /// is kept to `n · (p + n) <=` this (at least 16 tokens): attention makes late slices of a
    /// long prompt cost more per token, so they are made shorter.
    pub max_prefill_area_decoding: usize,
    /// Sequences running at once.
    pub max_running: usize,
    /// Waiting requests considered for admission each step.
    pub lookahead: usize,
    /// Effective-priority bonus per step waited.
    pub aging_per_step: f64,
    /// Hybrid models: a recurrent-state snapshot every this many tokens (rounded up to
    /// whole blocks), besides those at the end of prompts and turns.
    pub snapshot_interval: usize,
    /// Speculative decoding: draft tokens per step at most, all decodes together (0:
    /// none). A decode takes its sequence's draft ([`SeqStore::draft_len`]) from what
    /// the step's token budget and the free blocks leave after everything else: a draft
    /// never preempts nor holds another chunk back.
    pub draft_budget: usize,
    /// No drafts in a step where more sequences than this decode: a draft pays where a
    /// decode costs its weights' bytes, which the draft's rows share, not where the
    /// pass is already bound by its rows' arithmetic (a CPU past a few rows).
    pub draft_max_decodes: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_batch_tokens: 512,
            max_prefill_tokens: 256,
            max_prefill_tokens_decoding: 128,
            decodes_in_prefill_slice: false,
            max_prefill_area_decoding: 128 * 1024,
            max_running: 64,
            lookahead: 8,
            aging_per_step: 0.01,
            snapshot_interval: 512,
            draft_budget: 0,
            draft_max_decodes: usize::MAX,
        }
    }
}

/// A request as the scheduler sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Request {
    pub id: SeqId,
    pub prompt_len: usize,
    /// Higher runs first.
    pub priority: i32,
    /// At admission, start from the longest cached prefix (see [`KvManager::share_prefix`]).
    pub reuse_prefix: bool,
    /// An owner (pinned context, parked session) whose blocks this request continues.
    pub prefix_source: Option<SeqId>,
    /// The most tokens (prompt and drawn) it can reach, where bounded (its reply's
    /// `max_tokens`, the context): once its counted tokens reach this, the token in flight
    /// is its last, so it takes no further decode row. With steps overlapping, that row
    /// would be a pass queued for a token never drawn, which a request arriving next
    /// waits behind (a whole decode step at one agent).
    pub token_limit: Option<usize>,
}

/// One sequence's tokens in this step: positions `start_pos .. start_pos + n_tokens`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduledChunk {
    pub seq: SeqId,
    pub start_pos: usize,
    pub n_tokens: usize,
    /// The blocks appended to the sequence's block table since its previous chunk (the
    /// whole table at admission, and again at re-admission after a preemption): the
    /// runner keeps each running sequence's table and appends these, so the table is
    /// never rebuilt. Together they cover `0 .. start_pos + n_tokens`.
    pub new_blocks: Vec<u32>,
    /// True when this chunk reaches the end of the known tokens, so its last
    /// position's logits produce the next token.
    pub samples: bool,
    /// Hybrid models: snapshot the sequence's state after this chunk (it ends on a
    /// block boundary at a snapshot point).
    pub snapshot: Option<SnapshotKind>,
    /// A decode's draft tokens: its last `drafts` tokens are guesses, and every one of
    /// its `n_tokens` positions samples (speculative decoding). Until the caller accepts
    /// some ([`Scheduler::accept_drafts`]), the sequence counts only its first token
    /// computed.
    pub drafts: usize,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulerOutput {
    pub chunks: Vec<ScheduledChunk>,
    /// Sequences preempted in this step (their KV is gone; they will be recomputed).
    pub preempted: Vec<SeqId>,
    /// Sequences admitted in this step, with how many leading tokens came from the cache.
    pub admitted: Vec<(SeqId, usize)>,
    /// A waiting request did not fit in free KV blocks, or a sequence was preempted:
    /// the caller may free memory it holds for later use (parked sessions).
    pub kv_short: bool,
}

/// The scheduler's part of one sequence's record. The caller keeps it in its own
/// request record (one record per id: the engine's), and hands the records to the
/// scheduler through a [`SeqStore`]; only the scheduler reads or changes it.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqState {
    priority: i32,
    arrival: u64,
    /// Step at which it started waiting (for aging).
    waiting_since: u64,
    /// Prompt plus generated tokens.
    num_tokens: usize,
    /// Tokens whose KV is in the cache.
    num_computed: usize,
    /// What its prefill computes since admission (snapshot points depend on it).
    prefill_target: usize,
    reuse_prefix: bool,
    prefix_source: Option<SeqId>,
    /// Leading blocks of its KV table already handed out in chunks (`new_blocks`).
    blocks_sent: usize,
    /// [`Request::token_limit`] (`usize::MAX`: none).
    token_limit: usize,
}

impl SeqState {
    /// Prompt plus generated tokens, as the scheduler counts them.
    pub fn num_tokens(&self) -> usize {
        self.num_tokens
    }

    /// Tokens whose KV is computed.
    pub fn num_computed(&self) -> usize {
        self.num_computed
    }
}

/// Where the scheduler finds the records of its sequences (waiting and running): every
/// id it was given by [`Scheduler::add`] and not yet [`Scheduler::finish`]ed. A record
/// gone without `finish` is dropped from the queues (and its KV freed) at the next
/// schedule.
pub trait SeqStore {
    fn state(&self, id: SeqId) -> Option<&SeqState>;
    fn state_mut(&mut self, id: SeqId) -> Option<&mut SeqState>;
    /// The sequence's known tokens (prompt and generated), which admission matches
    /// against the prefix cache; fewer than it counts: no prefix sharing.
    fn tokens(&self, id: SeqId) -> &[u32];
    /// Draft tokens the sequence proposes for its next decode (speculative decoding).
    fn draft_len(&self, _id: SeqId) -> usize {
        0
    }
}

/// Records with no tokens (no prefix sharing): the scheduler alone, as in its tests.
impl SeqStore for HashMap<SeqId, SeqState> {
    fn state(&self, id: SeqId) -> Option<&SeqState> {
        self.get(&id)
    }

    fn state_mut(&mut self, id: SeqId) -> Option<&mut SeqState> {
        self.get_mut(&id)
    }

    fn tokens(&self, _: SeqId) -> &[u32] {
        &[]
    }
}

/// `id`'s record (present: [`Scheduler::schedule`] prunes ids without one first).
fn st(seqs: &dyn SeqStore, id: SeqId) -> &SeqState {
    seqs.state(id)
        .expect("pruned: every queued id has a record")
}

fn st_mut(seqs: &mut dyn SeqStore, id: SeqId) -> &mut SeqState {
    seqs.state_mut(id)
        .expect("pruned: every queued id has a record")
}

#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    waiting: Vec<SeqId>,
    running: Vec<SeqId>,
    step: u64,
    arrivals: u64,
    preemptions: u64,
}

impl Scheduler {
    pub fn new(cfg: SchedulerConfig) -> Self {
        Scheduler {
            cfg,
            waiting: Vec::new(),
            running: Vec::new(),
            step: 0,
            arrivals: 0,
            preemptions: 0,
        }
    }

    /// Queues a request; its record must hold the returned state from now on.
    pub fn add(&mut self, r: Request) -> SeqState {
        self.arrivals += 1;
        let s = SeqState {
            priority: r.priority,
            arrival: self.arrivals,
            waiting_since: self.step,
            num_tokens: r.prompt_len,
            num_computed: 0,
            prefill_target: r.prompt_len,
            reuse_prefix: r.reuse_prefix,
            prefix_source: r.prefix_source,
            blocks_sent: 0,
            token_limit: r.token_limit.unwrap_or(usize::MAX),
        };
        self.waiting.push(r.id);
        s
    }

    /// The configuration it schedules by.
    pub fn config(&self) -> &SchedulerConfig {
        &self.cfg
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The sequences waiting for admission (new, or preempted), in admission order.
    pub fn waiting(&self) -> &[SeqId] {
        &self.waiting
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Total preemptions so far.
    pub fn preemptions(&self) -> u64 {
        self.preemptions
    }

    /// Records the result of a step: every scheduled chunk is now computed, and
    /// sampling chunks appended one token (unless the sequence then finished). A
    /// decode's draft tokens are not counted: [`Scheduler::accept_drafts`] counts those
    /// the model drew too.
    pub fn commit(&mut self, out: &SchedulerOutput, seqs: &mut dyn SeqStore) {
        for c in &out.chunks {
            if let Some(s) = seqs.state_mut(c.seq) {
                s.num_computed = c.start_pos + c.n_tokens - c.drafts;
                if c.samples {
                    s.num_tokens += 1;
                }
            }
        }
    }

    /// After [`Scheduler::commit`]: `accepted` of a decode's draft tokens were drawn by
    /// the model too, so their KV is computed and the token drawn after them is the
    /// sequence's next. The rest of the draft's KV is written over by later chunks (its
    /// blocks stay in the table).
    pub fn accept_drafts(&mut self, seqs: &mut dyn SeqStore, seq: SeqId, accepted: usize) {
        if let Some(s) = seqs.state_mut(seq) {
            s.num_computed += accepted;
            s.num_tokens += accepted;
        }
    }

    /// Removes a sequence (finished, cancelled) and frees its blocks; its record may go.
    pub fn finish(&mut self, seq: SeqId, kv: &mut KvManager) {
        self.running.retain(|&s| s != seq);
        self.waiting.retain(|&s| s != seq);
        kv.free(seq);
    }

    fn effective_priority(&self, seqs: &dyn SeqStore, id: SeqId) -> f64 {
        let s = st(seqs, id);
        s.priority as f64 + self.cfg.aging_per_step * (self.step - s.waiting_since) as f64
    }

    /// Running sequence to evict: lowest priority, then newest arrival.
    fn victim(&self, seqs: &dyn SeqStore) -> Option<SeqId> {
        self.running.iter().copied().min_by(|&a, &b| {
            let (sa, sb) = (st(seqs, a), st(seqs, b));
            sa.priority
                .cmp(&sb.priority)
                .then(sb.arrival.cmp(&sa.arrival))
        })
    }

    fn preempt(
        &mut self,
        seqs: &mut dyn SeqStore,
        id: SeqId,
        kv: &mut KvManager,
        out: &mut SchedulerOutput,
    ) {
        kv.free(id);
        self.running.retain(|&s| s != id);
        let s = st_mut(seqs, id);
        s.num_computed = 0;
        s.blocks_sent = 0;
        s.waiting_since = self.step;
        self.waiting.insert(0, id);
        out.preempted.push(id);
        out.chunks.retain(|c| c.seq != id);
        out.kv_short = true;
        self.preemptions += 1;
    }

    /// The blocks of `seq`'s table not yet handed out, now marked as handed out.
    fn new_blocks(seqs: &mut dyn SeqStore, seq: SeqId, kv: &KvManager) -> Vec<u32> {
        let table = kv.table(seq).unwrap_or_default();
        let s = st_mut(seqs, seq);
        let fresh = table.get(s.blocks_sent..).unwrap_or_default().to_vec();
        s.blocks_sent = table.len();
        fresh
    }

    /// Blocks for `seq` to reach `n_tokens`, preempting others (never `seq` itself
    /// unless it is the only choice) until they fit. `false`: `seq` was preempted.
    fn grow(
        &mut self,
        seqs: &mut dyn SeqStore,
        seq: SeqId,
        n_tokens: usize,
        kv: &mut KvManager,
        out: &mut SchedulerOutput,
    ) -> bool {
        loop {
            if kv.allocate_slots(seq, n_tokens).is_some() {
                return true;
            }
            let victim = match self.victim(seqs) {
                Some(v) if v != seq => v,
                _ => {
                    self.preempt(seqs, seq, kv, out);
                    return false;
                }
            };
            self.preempt(seqs, victim, kv, out);
        }
    }

    /// Drops queued ids whose record is gone (never `finish`ed), freeing their KV.
    fn prune(&mut self, seqs: &dyn SeqStore, kv: &mut KvManager) {
        for id in self.running.iter().chain(&self.waiting) {
            if seqs.state(*id).is_none() {
                kv.free(*id);
            }
        }
        self.running.retain(|&id| seqs.state(id).is_some());
        self.waiting.retain(|&id| seqs.state(id).is_some());
    }

    /// Builds the next step's batch from the records in `seqs`; a waiting sequence's
    /// admission starts from the longest cached prefix of its known tokens.
    pub fn schedule(&mut self, seqs: &mut dyn SeqStore, kv: &mut KvManager) -> SchedulerOutput {
        self.prune(seqs, kv);
        self.step += 1;
        let mut out = SchedulerOutput::default();
        let mut budget = self.cfg.max_batch_tokens;
        let points = kv
            .is_stateful()
            .then(|| SnapshotPoints::new(kv.block_size(), self.cfg.snapshot_interval));

        // Highest priority first, oldest first among equals.
        let mut order = self.running.clone();
        order.sort_by_key(|&id| (Reverse(st(seqs, id).priority), st(seqs, id).arrival));

        // 1. decodes
        let mut decodes = Vec::new();
        for &id in &order {
            if !self.running.contains(&id) || budget == 0 {
                continue;
            }
            let s = st(seqs, id);
            // (At its limit the token in flight is its last: it ends when that lands.)
            if s.num_tokens - s.num_computed != 1 || s.num_tokens >= s.token_limit {
                continue;
            }
            let pos = s.num_computed;
            if self.grow(seqs, id, pos + 1, kv, &mut out) {
                budget -= 1;
                decodes.push(id);
                let new_blocks = Self::new_blocks(seqs, id, kv);
                let snapshot = points
                    .filter(|_| kv.is_stateful())
                    .and_then(|p| p.after_decode(pos));
                out.chunks.push(ScheduledChunk {
                    seq: id,
                    start_pos: pos,
                    n_tokens: 1,
                    new_blocks,
                    samples: true,
                    snapshot,
                    drafts: 0,
                });
            }
        }
        let decoding = !out.chunks.is_empty();
        let mut prefill_budget = if decoding {
            let rows = if self.cfg.decodes_in_prefill_slice {
                decodes.len()
            } else {
                0
            };
            let slice = self
                .cfg
                .max_prefill_tokens_decoding
                .min(self.cfg.max_prefill_tokens);
            // (Never below MIN_SLICE for the decodes: prompts still move among many.)
            slice.saturating_sub(rows).max(MIN_SLICE.min(slice))
        } else {
            self.cfg.max_prefill_tokens
        }
        .min(budget);

        // 2. running prefills: shortest remaining first (within a priority), so a short
        //    prompt is not held behind a long one. While requests wait for admission, no
        //    one prefill takes more than half of the budget: the rest admits them.
        let mut prefills: Vec<SeqId> = order
            .iter()
            .copied()
            .filter(|id| {
                let s = st(seqs, *id);
                self.running.contains(id) && s.num_tokens - s.num_computed > 1
            })
            .collect();
        prefills.sort_by_key(|id| {
            let s = st(seqs, *id);
            (
                Reverse(s.priority),
                s.num_tokens - s.num_computed,
                s.arrival,
            )
        });
        let admitting = !self.waiting.is_empty() && self.running.len() < self.cfg.max_running;
        let slice_cap = if admitting {
            (prefill_budget / 2).max(MIN_SLICE.min(prefill_budget))
        } else {
            prefill_budget
        };
        for id in prefills {
            if prefill_budget == 0 {
                break;
            }
            if !self.running.contains(&id) {
                continue; // preempted to make room for an earlier one
            }
            let s = st(seqs, id);
            let left = s.num_tokens - s.num_computed;
            let start = s.num_computed;
            let mut n = left.min(prefill_budget).min(slice_cap);
            if decoding {
                n = area_capped(n, start, self.cfg.max_prefill_area_decoding);
            }
            let (n, snapshot) = match points {
                Some(p) => p.align(start, n, s.prefill_target),
                None => (n, None),
            };
            if self.grow(seqs, id, start + n, kv, &mut out) {
                prefill_budget -= n;
                let new_blocks = Self::new_blocks(seqs, id, kv);
                out.chunks.push(ScheduledChunk {
                    seq: id,
                    start_pos: start,
                    n_tokens: n,
                    new_blocks,
                    samples: n == left,
                    snapshot,
                    drafts: 0,
                });
            }
        }

        // 3. admission by KV budget with lookahead and aging
        let mut candidates: Vec<SeqId> = self.waiting.clone();
        candidates.sort_by(|a, b| {
            self.effective_priority(seqs, *b)
                .total_cmp(&self.effective_priority(seqs, *a))
                .then(st(seqs, *a).arrival.cmp(&st(seqs, *b).arrival))
        });
        for id in candidates.into_iter().take(self.cfg.lookahead) {
            if prefill_budget == 0 || self.running.len() >= self.cfg.max_running {
                break;
            }
            let s = st(seqs, id);
            let (num_tokens, source) = (s.num_tokens, s.prefix_source);
            // Even a full prefix hit shares at most the full blocks before the last
            // token: when the rest cannot fit, skip the hashing (this runs every step for
            // every request waiting on memory).
            if !kv.could_admit(num_tokens) {
                out.kv_short = true;
                continue;
            }
            let mut cached = 0;
            if s.reuse_prefix {
                let t = seqs.tokens(id);
                if t.len() >= num_tokens {
                    cached = kv.share_prefix(id, &t[..num_tokens], num_tokens - 1, source);
                }
            }
            // The whole known sequence must fit in free blocks, so admission never preempts.
            if !kv.can_fit(id, num_tokens + 1) {
                kv.free(id); // returns any shared prefix
                out.kv_short = true;
                continue;
            }
            let n = (num_tokens - cached).min(prefill_budget);
            let (n, snapshot) = match points {
                Some(p) => p.align(cached, n, num_tokens),
                None => (n, None),
            };
            kv.allocate_slots(id, cached + n)
                .expect("checked by can_fit");
            self.waiting.retain(|&w| w != id);
            self.running.push(id);
            let s = st_mut(seqs, id);
            s.num_computed = cached;
            s.prefill_target = num_tokens;
            prefill_budget -= n;
            let new_blocks = Self::new_blocks(seqs, id, kv);
            out.admitted.push((id, cached));
            out.chunks.push(ScheduledChunk {
                seq: id,
                start_pos: cached,
                n_tokens: n,
                new_blocks,
                samples: cached + n == num_tokens,
                snapshot,
                drafts: 0,
            });
        }

        // 4. drafts, from what the step left
        self.add_drafts(seqs, kv, &mut out, &decodes);
        out
    }

    /// Speculative decoding: each decode's draft ([`SeqStore::draft_len`]) from what the
    /// step left: the token budget after every decode, prefill and admission (within
    /// `draft_budget`), and free blocks only, so a draft never preempts nor holds another
    /// chunk back; a draft that does not fit whole is cut to what fits. None while more
    /// than `draft_max_decodes` sequences decode, nor for hybrid models (a recurrent state
    /// cannot take back rejected tokens). Drafted decodes then go after the plain ones
    /// (a backend that runs a pass's leading one-token decodes by a kernel of their own
    /// keeps every plain decode there).
    fn add_drafts(
        &self,
        seqs: &mut dyn SeqStore,
        kv: &mut KvManager,
        out: &mut SchedulerOutput,
        decodes: &[SeqId],
    ) {
        if self.cfg.draft_budget == 0
            || kv.is_stateful()
            || decodes.len() > self.cfg.draft_max_decodes
        {
            return;
        }
        let used: usize = out.chunks.iter().map(|c| c.n_tokens).sum();
        let mut left = self
            .cfg
            .max_batch_tokens
            .saturating_sub(used)
            .min(self.cfg.draft_budget);
        let n_decodes = out
            .chunks
            .iter()
            .take_while(|c| decodes.contains(&c.seq))
            .count();
        for c in &mut out.chunks[..n_decodes] {
            let mut d = seqs.draft_len(c.seq).min(left);
            while d > 0 && kv.allocate_slots(c.seq, c.start_pos + 1 + d).is_none() {
                d -= 1;
            }
            if d > 0 {
                c.n_tokens += d;
                c.drafts = d;
                left -= d;
                c.new_blocks.extend(Self::new_blocks(seqs, c.seq, kv));
            }
        }
        // A stable sort: plain decodes, then drafted ones, each in their order.
        out.chunks[..n_decodes].sort_by_key(|c| c.drafts > 0);
    }
}

/// The smallest prefill slice a cap leaves (a slice also never goes below this for the
/// attention-area cap).
const MIN_SLICE: usize = 16;

/// The largest `m <= n` with `m · (start + m) <= area`, but at least `min(n, 16)`.
fn area_capped(n: usize, start: usize, area: usize) -> usize {
    let floor = n.min(MIN_SLICE);
    let mut m = n;
    while m > floor && m.saturating_mul(start + m) > area {
        m -= 1;
    }
    m
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
