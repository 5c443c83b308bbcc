//! Speculative decoding's draft model: a small model of the target's vocabulary guesses
//! each drafting sequence's next tokens, greedily, in one pass per token over all the
//! drafting sequences at once. The target then checks the guesses as it checks copy
//! drafts (`crate::land`), so the reply is the target's either way.
//!
//! The draft model keeps its own KV pool and persistent batch (a [`ModelRunner`]), and
//! per sequence how far its KV follows the sequence's tokens ([`Follow`]). A step's
//! proposals:
//!
//! 1. **catch-up**: one pass over the tokens each sequence has that the draft's KV does
//!    not (a new prompt, the tokens the target kept last step), at most
//!    [`DraftModel::catchup`] tokens in all, so a long new prompt is read over several
//!    steps; a sequence drafts once it is caught up, its last row drawing the first guess;
//! 2. then one-token passes, each sequence's last guess in and its next guess out, while
//!    a sequence wants more.
//!
//! A guess's KV stays: at the next proposal the guesses the target kept are already
//! computed, and the runner's row goes back to the first one it did not keep (later
//! chunks write over the rest).
//!
//! Full blocks of a sequence's tokens are cached by the chain hash of those tokens
//! ([`DraftBlocks`]) once their KV is computed: a new sequence starts from the cached
//! blocks its tokens begin with, as the target's prefix cache lets it, so agents on one
//! brief read it into the draft once. A block is cached only where it ends before the
//! sequence's last token, which no rewind reaches: its KV is never written again.

use std::collections::HashMap;

use inferd_core::kv::SeqId;
use inferd_core::sampling::SamplingParams;
use inferd_runtime::{Backend, KvDtype, LayerKind, Model, RuntimeError};

use crate::draft_blocks::{chain, DraftBlocks};
use crate::runner::{ChunkTokens, Draw, ModelRunner, NewRow, StepChunk, StepInput};

type Result<T> = std::result::Result<T, RuntimeError>;

/// A sequence that wants a draft this step.
pub(crate) struct DraftRequest<'a> {
    pub seq: SeqId,
    /// Its prompt and generated tokens.  // [prompt_len + generated]
    pub tokens: &'a [u32],
    pub prompt_len: usize,
    /// Guesses wanted at most (at least 1).
    pub max: usize,
}

/// How far the draft's KV follows one sequence.
struct Follow {
    /// Its KV blocks in the draft's pool, in position order (its first `hashed` maybe
    /// other sequences' too).
    blocks: Vec<u32>,
    /// Leading blocks whose tokens are hashed (and cached, or taken from the cache), and
    /// the chain hash through them.
    hashed: usize,
    chain: u64,
    /// Of those, how many the runner's row has (the rest go with its next chunk).
    sent: usize,
    /// Leading tokens of the sequence whose KV is computed.
    computed: usize,
    /// The guesses after those whose KV is computed too (in order), of the last draft.
    guessed: Vec<u32>,
    /// The proposal it was last asked in (eviction goes by it).
    used: u64,
}

impl Follow {
    /// The chain hash of its next block's tokens (block `hashed` of `tokens`).
    fn next_hash(&self, tokens: &[u32], block_size: usize) -> u64 {
        let at = self.hashed * block_size;
        chain(self.chain, &tokens[at..at + block_size])
    }
}

/// The draft model and its KV: see the module's documentation.
pub(crate) struct DraftModel<B: Backend> {
    runner: ModelRunner<B>,
    /// Its pool's blocks: free, held, cached.
    blocks: DraftBlocks,
    block_size: usize,
    /// Tokens a catch-up pass takes at most (its workspace's size).
    catchup: usize,
    /// Guesses at or past this id are cut (the target has no such token), and a
    /// sequence holding a token at or past it drafts nothing (the draft has none).
    vocab_limit: u32,
    /// Sequences a pass draws for at most (its workspace's logits rows).
    max_rows: usize,
    /// Longest sequence the draft model takes (its context).
    max_context: usize,
    /// A guess less likely than this (natural log) under the draft model ends the draft.
    min_logprob: f32,
    seqs: HashMap<SeqId, Follow>,
    /// Rows made or dropped since its runner's last pass.
    pending: StepInput,
    /// Proposals so far.
    calls: u64,
}

/// The draft's pool and passes, as the engine sizes them.
pub(crate) struct DraftSizes {
    /// Blocks of `block_size` tokens in its KV pool.
    pub num_blocks: usize,
    pub block_size: usize,
    pub dtype: KvDtype,
    /// Tokens a catch-up pass takes at most.
    pub catchup: usize,
    /// Sequences a pass draws for at most.
    pub max_rows: usize,
    /// The target's vocabulary size.
    pub vocab_limit: usize,
    /// A guess the draft model gives less probability than this ends the draft (0: never).
    pub min_confidence: f32,
}

impl<B: Backend> DraftModel<B> {
    /// Allocates the draft's pool and workspace. The model must be dense: a recurrent
    /// state cannot go back to a guess the target did not keep.
    pub fn new(model: Model<B>, s: DraftSizes) -> Result<Self> {
        if model
            .cfg
            .layer_kinds
            .iter()
            .any(|&k| k != LayerKind::FullAttention)
        {
            return Err(RuntimeError::Other(
                "a draft model must be a dense transformer (a hybrid's recurrent state \
                 cannot go back to a guess the target did not keep)"
                    .into(),
            ));
        }
        let catchup = s.catchup.max(s.max_rows).max(1);
        let max_context = model.cfg.max_context;
        let draft_vocab = model.cfg.vocab_size;
        let ws = model.workspace(catchup, s.max_rows.max(1))?;
        let layout = model.kv_layout(s.num_blocks, s.block_size, s.dtype);
        let kv = model.alloc_kv(&layout)?;
        Ok(DraftModel {
            runner: ModelRunner::new(model, kv, layout, ws),
            blocks: DraftBlocks::new(s.num_blocks),
            block_size: s.block_size,
            catchup,
            vocab_limit: s.vocab_limit.min(draft_vocab).min(u32::MAX as usize) as u32,
            max_rows: s.max_rows.max(1),
            max_context,
            min_logprob: if s.min_confidence > 0.0 {
                s.min_confidence.min(1.0).ln()
            } else {
                f32::NEG_INFINITY
            },
            seqs: HashMap::new(),
            pending: StepInput::default(),
            calls: 0,
        })
    }

    /// Warm-up at start, before any sequence: a short prompt's pass and a decode pass (on a
    /// GPU the libraries' kernels loaded and plans made, not in the first drafting step). A
    /// pool too small for it skips it: it only drafts less.
    pub fn warmup(&mut self) -> Result<()> {
        let n = 16.min(self.max_context.saturating_sub(1)).max(1);
        let want = (n + 1).div_ceil(self.block_size);
        let table: Vec<u32> = (0..want).map_while(|_| self.blocks.take()).collect();
        let out = if table.len() == want {
            self.runner.warm_up(n, table.clone(), 0)
        } else {
            Ok(())
        };
        for &b in &table {
            self.blocks.release(b);
        }
        out
    }

    /// Forgets the sequences `live` says are gone (their blocks go back to the pool).
    pub fn retain(&mut self, live: impl Fn(SeqId) -> bool) {
        let gone: Vec<SeqId> = self.seqs.keys().copied().filter(|&s| !live(s)).collect();
        for s in gone {
            self.forget(s);
        }
    }

    fn forget(&mut self, seq: SeqId) {
        if let Some(f) = self.seqs.remove(&seq) {
            for b in f.blocks {
                self.blocks.release(b);
            }
            self.pending.finished.push(seq);
        }
    }

    /// Up to `r.max` guesses for each of `reqs` (distinct sequences), in their order:
    /// as many as the model is sure enough of (maybe none); `None` for a sequence that
    /// did not draft this step (still catching up, its KV does not fit, past the draft
    /// model's context or past the pass's rows).
    pub fn propose(&mut self, reqs: &[DraftRequest<'_>]) -> Result<Vec<Option<Vec<u32>>>> {
        self.calls += 1;
        let mut drafts: Vec<Option<Vec<u32>>> = vec![None; reqs.len()];
        // Pass 1: each sequence's catch-up; `wants[i]`: guesses request i still wants
        // (0: it does not draft this step).
        let mut wants = vec![0usize; reqs.len()];
        let mut chunks = Vec::new();
        // The requests read into the draft this step (their full blocks cached after).
        let mut read = Vec::new();
        let mut budget = self.catchup;
        // Every sequence asked keeps its blocks through this proposal.
        for r in reqs {
            if let Some(f) = self.seqs.get_mut(&r.seq) {
                f.used = self.calls;
            }
        }
        // Those with least to catch up first, so a long new prompt does not hold back
        // the sequences that only need their last tokens.
        let mut order: Vec<usize> = (0..reqs.len()).collect();
        order.sort_by_key(|&i| {
            let r = &reqs[i];
            let computed = self.seqs.get(&r.seq).map_or(0, |f| f.computed);
            r.tokens.len().saturating_sub(computed)
        });
        let mut rows = 0;
        for i in order {
            let r = &reqs[i];
            if budget == 0 || rows == self.max_rows {
                break;
            }
            if r.tokens.is_empty() || r.max == 0 || r.tokens.len() + r.max > self.max_context {
                continue;
            }
            let valid = self.follow(r);
            let take = (r.tokens.len() - valid).min(budget);
            if r.tokens[valid..valid + take]
                .iter()
                .any(|&t| t >= self.vocab_limit)
            {
                continue;
            }
            let caught_up = valid + take == r.tokens.len();
            // Its KV up to its last guess's position (the last guess is not run).
            let end = if caught_up {
                r.tokens.len() + r.max - 1
            } else {
                valid + take
            };
            if !self.reserve(r.seq, end) {
                continue;
            }
            budget -= take;
            let f = self.seqs.get_mut(&r.seq).expect("followed above");
            f.computed = valid + take;
            read.push(i);
            chunks.push(StepChunk {
                seq: r.seq,
                start_pos: valid,
                tokens: ChunkTokens::Known(r.tokens[valid..valid + take].to_vec()),
                new_blocks: f.blocks[f.sent..].to_vec(),
                state_slot: 0,
                samples: caught_up,
                drafts: 0,
            });
            f.sent = f.blocks.len();
            if caught_up {
                wants[i] = r.max;
                drafts[i] = Some(Vec::new());
                rows += 1;
            }
        }
        // Then a pass per guess: the last guess in, the next out.
        let mut round = 0;
        while !chunks.is_empty() {
            let sampling: Vec<usize> = (0..reqs.len()).filter(|&i| wants[i] > round).collect();
            let guesses = self.pass(std::mem::take(&mut chunks), reqs, &sampling)?;
            round += 1;
            for (&i, (g, logprob)) in sampling.iter().zip(guesses) {
                // An unsure guess ends the draft: the target would likely not draw it,
                // and every guess costs a pass here and a row there.
                if g >= self.vocab_limit || logprob < self.min_logprob {
                    wants[i] = 0;
                    continue;
                }
                drafts[i].as_mut().expect("a caught-up sequence").push(g);
                if wants[i] > round {
                    let r = &reqs[i];
                    let f = self.seqs.get_mut(&r.seq).expect("a sampling sequence");
                    f.guessed.push(g);
                    chunks.push(StepChunk {
                        seq: r.seq,
                        start_pos: r.tokens.len() + round - 1,
                        tokens: ChunkTokens::Known(vec![g]),
                        new_blocks: Vec::new(),
                        state_slot: 0,
                        samples: true,
                        drafts: 0,
                    });
                }
            }
        }
        // The catch-up's KV is computed: its full blocks can serve later sequences.
        for i in read {
            self.cache_full_blocks(&reqs[i]);
        }
        Ok(drafts)
    }

    /// Caches `r.seq`'s blocks that are full of computed KV and end before its last token.
    fn cache_full_blocks(&mut self, r: &DraftRequest<'_>) {
        let bs = self.block_size;
        let Some(f) = self.seqs.get_mut(&r.seq) else {
            return;
        };
        let end = f.computed.min(r.tokens.len() - 1);
        while (f.hashed + 1) * bs <= end {
            let h = f.next_hash(r.tokens, bs);
            self.blocks.cache(f.blocks[f.hashed], h);
            (f.hashed, f.chain) = (f.hashed + 1, h);
        }
    }

    /// Starts following `r.seq` if it is new, and returns how many of its leading
    /// tokens the draft's KV holds (never its last: that one's logits give the first
    /// guess); its runner row goes back there.
    fn follow(&mut self, r: &DraftRequest<'_>) -> usize {
        let (calls, block_size) = (self.calls, self.block_size);
        let (pending, blocks) = (&mut self.pending, &mut self.blocks);
        let f = self.seqs.entry(r.seq).or_insert_with(|| {
            if let Some(at) = pending.finished.iter().position(|&s| s == r.seq) {
                // Dropped since the last pass, and back before the next: its row stays,
                // emptied (a diff must not make and drop one sequence's row).
                pending.finished.swap_remove(at);
                pending.preempted.push(r.seq);
            } else {
                pending.new.push(NewRow {
                    seq: r.seq,
                    prompt_len: r.prompt_len,
                    sampling: SamplingParams {
                        // The guess's own logprob: how sure the draft model is.
                        logprobs: Some(0),
                        ..SamplingParams::greedy()
                    },
                    dry_tokenizer: None,
                });
            }
            // The cached blocks its tokens begin with (ending before its last token).
            let mut f = Follow {
                blocks: Vec::new(),
                hashed: 0,
                chain: 0,
                sent: 0,
                computed: 0,
                guessed: Vec::new(),
                used: calls,
            };
            let bs = block_size;
            while (f.hashed + 1) * bs < r.tokens.len() {
                let h = f.next_hash(r.tokens, bs);
                let Some(b) = blocks.hold_cached(h) else {
                    break;
                };
                f.blocks.push(b);
                (f.hashed, f.chain) = (f.hashed + 1, h);
            }
            f.computed = f.hashed * bs;
            f
        });
        let after = r.tokens.get(f.computed..).unwrap_or_default();
        let kept = f
            .guessed
            .iter()
            .zip(after)
            .take_while(|(g, t)| g == t)
            .count();
        let valid = (f.computed.min(r.tokens.len()) + kept).min(r.tokens.len() - 1);
        f.computed = valid;
        f.guessed.clear();
        self.runner.rewind(r.seq, valid);
        valid
    }

    /// Gives `seq` blocks for positions `..end`, taking them from sequences not asked
    /// in this proposal, least recently asked first. `false` if they do not fit.
    fn reserve(&mut self, seq: SeqId, end: usize) -> bool {
        let want = end.div_ceil(self.block_size);
        let have = self.seqs.get(&seq).map_or(0, |f| f.blocks.len());
        let need = want.saturating_sub(have);
        if self.blocks.available() < need && !self.evict_for(need) {
            return false;
        }
        let taken: Vec<u32> = (0..need)
            .map(|_| self.blocks.take().expect("room made above"))
            .collect();
        self.seqs
            .get_mut(&seq)
            .expect("followed before reserving")
            .blocks
            .extend(taken);
        true
    }

    /// Forgets sequences not asked in this proposal, least recently asked first, until
    /// `need` blocks are available; `false` (forgetting none) if all of them would not
    /// make that room: else the others' KV would go for nothing.
    fn evict_for(&mut self, need: usize) -> bool {
        // The room: blocks that only sequences not asked hold.
        let mut idle_holders: HashMap<u32, u32> = HashMap::new();
        for f in self.seqs.values().filter(|f| f.used < self.calls) {
            for &b in &f.blocks {
                *idle_holders.entry(b).or_default() += 1;
            }
        }
        let idle = idle_holders
            .iter()
            .filter(|&(&b, &n)| self.blocks.holders(b) == n)
            .count();
        if self.blocks.available() + idle < need {
            return false;
        }
        while self.blocks.available() < need {
            let idle = self
                .seqs
                .iter()
                .filter(|(_, f)| f.used < self.calls)
                .min_by_key(|(_, f)| f.used)
                .map(|(&s, _)| s)
                .expect("the idle sequences' blocks make room (checked above)");
            self.forget(idle);
        }
        true
    }

    /// Runs one pass of `chunks` (with the rows made or dropped since the last) and
    /// returns the greedy token of each request in `sampling` and its logprob (in order;
    /// each sampling chunk's sequence once).
    fn pass(
        &mut self,
        chunks: Vec<StepChunk>,
        reqs: &[DraftRequest<'_>],
        sampling: &[usize],
    ) -> Result<Vec<(u32, f32)>> {
        let mut step = std::mem::take(&mut self.pending);
        step.chunks = chunks;
        let prepared = self.runner.prepare(step)?;
        let launched = self.runner.launch(prepared)?;
        let draws: Vec<Draw<'_>> = sampling
            .iter()
            .map(|&i| Draw {
                seq: reqs[i].seq,
                prompt: &[],
                generated: &[],
                mask: None,
                drafts: &[],
                draft_masks: &[],
            })
            .collect();
        let drawing = self.runner.start_draws(launched, &draws)?;
        let out = self.runner.finish_draws(drawing)?;
        Ok(out
            .sampled
            .into_iter()
            .map(|(_, s)| (s.token, s.logprob.unwrap_or(0.0)))
            .collect())
    }
}

#[cfg(test)]
#[path = "draft_tests.rs"]
mod tests;
