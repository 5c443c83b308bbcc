//! The model runner: between the engine loop and [`Model`]. It owns the model, the KV
//! pool with its layout, the pass's [`Workspace`] and the persistent batch (a row per
//! admitted sequence: its block table, state slot, position, sampler and DRY history),
//! and runs a step in three phases so that a device can later overlap them:
//!
//! 1. [`ModelRunner::prepare`] (host only): applies the step's diff to the rows and
//!    lays the pass out as one [`ForwardBatch`];
//! 2. [`ModelRunner::launch`]: the block and state copies, then the forward pass
//!    (its logits stay in the workspace); the engine computes grammar masks meanwhile;
//! 3. [`ModelRunner::collect`]: each sampling row the engine asks for draws its token
//!    from its logits row on the device; only ids and logprobs come back. In two halves
//!    for overlapped steps: [`ModelRunner::start_draws`] queues the draws, and
//!    [`ModelRunner::finish_draws`] waits for their ids, so the next step can be prepared
//!    and launched in between (its decodes read the draws on the device).
//!
//! The contract is in [`step`]. Invariants: a row's table only grows while its
//! sequence runs (cleared by preemption, dropped at the end); a chunk starts where the
//! row's previous chunk ended, or anywhere at (re)admission; the runner never decides
//! anything (who runs, which block, which token is allowed): the scheduler, the KV
//! manager and the engine's constraints do.

mod rows;
mod step;

use std::collections::HashMap;

use inferd_core::kv::SeqId;
use inferd_core::sampling::Extra;
use inferd_grammar::TokenMask;
use inferd_runtime::{Backend, ForwardBatch, KvLayout, Model, RuntimeError, SampleRow, Workspace};

use rows::{Drawn, Rows};
pub(crate) use step::{ChunkTokens, Draw, NewRow, StepChunk, StepInput, StepOutput};

type Result<T> = std::result::Result<T, RuntimeError>;

pub(crate) struct ModelRunner<B: Backend> {
    model: Model<B>,
    kv: B::Kv,
    layout: KvLayout,
    /// The pass's device buffers, allocated once (grown if a pass is larger).
    ws: Workspace<B>,
    rows: Rows,
    /// Sample ops started so far (a row's [`Drawn::OnDevice`] names the one it is in).
    draw_calls: u64,
}

/// A step whose diff is applied and whose pass is laid out, not yet run.
pub(crate) struct Prepared {
    batch: ForwardBatch,
    block_copies: Vec<(u32, u32)>,
    state_copies: Vec<(u32, u32)>,
    /// The sampling chunks' sequences and their sampling rows (1, or 1 + drafts), in
    /// logits-row order.
    sampling: Vec<(SeqId, usize)>,
}

impl Prepared {
    /// Tokens in the pass.
    pub fn n_tokens(&self) -> usize {
        self.batch.n_tokens()
    }
}

/// A step whose pass ran: its logits wait in the workspace for [`ModelRunner::collect`].
pub(crate) struct Launched {
    /// As [`Prepared`]'s.
    sampling: Vec<(SeqId, usize)>,
}

/// A step whose draws are queued ([`ModelRunner::start_draws`]), until
/// [`ModelRunner::finish_draws`] brings them back.
pub(crate) struct Drawing {
    /// The drawing sequences, in draw order (a speculative row's once per position).
    seqs: Vec<SeqId>,
    /// The sample op's number.
    call: u64,
}

impl Drawing {
    /// Whether `seq` draws in it.
    pub fn has(&self, seq: SeqId) -> bool {
        self.seqs.contains(&seq)
    }
}

impl<B: Backend> ModelRunner<B> {
    pub fn new(model: Model<B>, kv: B::Kv, layout: KvLayout, ws: Workspace<B>) -> Self {
        ModelRunner {
            model,
            kv,
            layout,
            ws,
            rows: Rows::default(),
            draw_calls: 0,
        }
    }

    pub fn model(&self) -> &Model<B> {
        &self.model
    }

    /// Rows in the persistent batch (admitted sequences not yet ended).
    #[cfg(test)]
    pub fn num_rows(&self) -> usize {
        self.rows.len()
    }

    /// Phase 1: applies the diff and lays out the pass (host work only).
    pub fn prepare(&mut self, mut step: StepInput) -> Result<Prepared> {
        let edits = self.rows.apply(&mut step).map_err(RuntimeError::BadBatch)?;
        let mut batch = ForwardBatch {
            table_edits: edits,
            ..ForwardBatch::default()
        };
        let mut sampling = Vec::new();
        for c in &step.chunks {
            let r = self.rows.get(c.seq).expect("apply made every chunk's row");
            let last;
            let mut on_device = None;
            let tokens = match &c.tokens {
                ChunkTokens::Known(t) => t.as_slice(),
                ChunkTokens::LastDrawn => {
                    last = [match r.last_drawn {
                        Some(Drawn::Known(t)) => t,
                        Some(Drawn::OnDevice { call, row }) if call == self.draw_calls => {
                            on_device = Some(row);
                            0
                        }
                        _ => {
                            return Err(RuntimeError::BadBatch(format!(
                                "sequence {}: a decode of its last draw, and it drew none \
                                 the runner can reach",
                                c.seq
                            )))
                        }
                    }];
                    &last[..]
                }
            };
            if let Some(row) = on_device {
                batch.drawn.push((batch.n_tokens(), row));
            }
            if c.drafts > 0 && (!c.samples || c.drafts >= tokens.len()) {
                return Err(RuntimeError::BadBatch(format!(
                    "sequence {}: {} draft tokens in a chunk of {}",
                    c.seq,
                    c.drafts,
                    tokens.len()
                )));
            }
            batch.push_row(
                tokens,
                c.start_pos,
                r.prompt_len,
                r.table_row,
                r.state_slot,
                c.samples,
            );
            if c.samples {
                // A speculative chunk's every position: its first token and the drafts.
                let last = batch.logits_rows.pop().expect("a sampling chunk's row");
                batch.logits_rows.extend(last - c.drafts..=last);
                sampling.push((c.seq, 1 + c.drafts));
            }
        }
        Ok(Prepared {
            batch,
            block_copies: step.block_copies,
            state_copies: step.state_copies,
            sampling,
        })
    }

    /// Phase 2: the queued block copies, the queued state copies (in order), then the
    /// forward pass.
    pub fn launch(&mut self, p: Prepared) -> Result<Launched> {
        self.model.copy_blocks(&mut self.kv, &p.block_copies)?;
        self.copy_state_slots(&p.state_copies)?;
        self.model
            .forward_in(&mut self.ws, &mut self.kv, &self.layout, &p.batch)?;
        Ok(Launched {
            sampling: p.sampling,
        })
    }

    /// Phase 3 in one call (the runner's tests): draws the token of each of `draws` (sampling rows of the launched pass,
    /// any subset, any order) on the device; `out.sampled[i]` is `draws[i]`'s.
    #[cfg(test)]
    pub fn collect(&mut self, launched: Launched, draws: &[Draw<'_>]) -> Result<StepOutput> {
        let drawing = self.start_draws(launched, draws)?;
        self.finish_draws(drawing)
    }

    /// Phase 3's first half: queues the draws of `draws` (as [`ModelRunner::collect`]).
    /// Each drawing row's next decode may run before [`ModelRunner::finish_draws`]: it
    /// reads the token where the draw left it.
    pub fn start_draws(&mut self, launched: Launched, draws: &[Draw<'_>]) -> Result<Drawing> {
        // Each sampling chunk's first logits row and its count.
        let mut logits_rows: HashMap<SeqId, (usize, usize)> = HashMap::new();
        let mut next = 0;
        for &(s, n) in &launched.sampling {
            logits_rows.insert(s, (next, n));
            next += n;
        }
        // A speculative draw's history runs on through its drafts, in the tokens
        // (penalties) and in DRY's breakers: position i reads it up to the first i
        // drafts. (Empty for a draw without drafts.)
        let histories: Vec<Vec<u32>> = draws
            .iter()
            .map(|d| match d.drafts {
                [] => Vec::new(),
                drafts => [d.generated, drafts].concat(),
            })
            .collect();
        let dry_histories: Vec<Vec<bool>> = draws
            .iter()
            .map(|d| {
                let Some(r) = self.rows.get(d.seq).filter(|_| !d.drafts.is_empty()) else {
                    return Vec::new();
                };
                let Some((_, base)) = &r.dry else {
                    return Vec::new();
                };
                let flags = d.drafts.iter().map(|&t| r.breaker(t).unwrap_or(false));
                base.iter().copied().chain(flags).collect()
            })
            .collect();
        let mut rows = self.rows.many_mut(draws.iter().map(|d| d.seq));
        let mut sample_rows = Vec::with_capacity(draws.len());
        let mut seqs = Vec::with_capacity(draws.len());
        for ((d, history), dry_history) in draws.iter().zip(&histories).zip(&dry_histories) {
            let (row, n) = *logits_rows.get(&d.seq).ok_or_else(|| {
                RuntimeError::BadBatch(format!("sequence {} has no logits row", d.seq))
            })?;
            let r = rows.remove(&d.seq).ok_or_else(|| {
                RuntimeError::BadBatch(format!("sequence {} has no row or draws twice", d.seq))
            })?;
            let masked = !d.drafts.is_empty() && d.mask.is_some();
            if n != 1 + d.drafts.len()
                || (masked && d.draft_masks.is_empty())
                || d.draft_masks.len() > d.drafts.len()
            {
                return Err(RuntimeError::BadBatch(format!(
                    "sequence {}: {} draft tokens ({} masks) drawn over {n} logits rows",
                    d.seq,
                    d.drafts.len(),
                    d.draft_masks.len()
                )));
            }
            let breaks = r.dry.as_ref().map_or(&[][..], |(_, b)| b.as_slice());
            r.forks = (1..n).map(|i| r.sampler.fork(i)).collect();
            sample_rows.push(SampleRow {
                row,
                sampler: &mut r.sampler,
                prompt: d.prompt,
                generated: d.generated,
                extra: Extra {
                    allowed: d.mask.as_ref().map(TokenMask::words),
                    breaks,
                },
            });
            let dry_base = dry_history.len().saturating_sub(d.drafts.len());
            for (i, fork) in r.forks.iter_mut().enumerate() {
                // Positions past the grammar's masks are drawn under the last one, and
                // not taken (`Seq::usable_draws`).
                let mask = d.draft_masks.get(i).or(d.draft_masks.last());
                sample_rows.push(SampleRow {
                    row: row + 1 + i,
                    sampler: fork,
                    prompt: d.prompt,
                    generated: &history[..d.generated.len() + 1 + i],
                    extra: Extra {
                        allowed: mask.filter(|_| masked).map(TokenMask::words),
                        breaks: dry_history.get(..dry_base + 1 + i).unwrap_or_default(),
                    },
                });
            }
            seqs.extend(std::iter::repeat_n(d.seq, n));
        }
        let known = self.model.sample_start(&self.ws, &mut sample_rows)?;
        drop(sample_rows);
        self.draw_calls += 1;
        let call = self.draw_calls;
        for (i, (&seq, k)) in seqs.iter().zip(known).enumerate() {
            if let Some(r) = self.rows.get_mut(seq) {
                // A speculative row's last draw is the one kept last: `settle` says.
                r.last_drawn = if !r.forks.is_empty() {
                    None
                } else {
                    Some(match k {
                        Some(t) => Drawn::Known(t),
                        None => Drawn::OnDevice { call, row: i },
                    })
                };
            }
        }
        Ok(Drawing { seqs, call })
    }

    /// Phase 3's second half: waits for `drawing`'s ids (and for no pass queued since);
    /// `out.sampled[i]` is its `i`-th draw's.
    pub fn finish_draws(&mut self, drawing: Drawing) -> Result<StepOutput> {
        let mut sampled = Vec::with_capacity(drawing.seqs.len());
        self.model.sample_finish(&mut sampled)?;
        let mut out = StepOutput::default();
        for (&seq, s) in drawing.seqs.iter().zip(sampled) {
            if let Some(r) = self.rows.get_mut(seq).filter(|r| r.forks.is_empty()) {
                r.note_sampled(s.token, drawing.call);
            }
            out.sampled.push((seq, s));
        }
        Ok(out)
    }

    /// A speculative draw of `seq` came back and the engine kept `kept` of its tokens,
    /// in order (see [`rows::Row::settle`]). A row that drew no draft is left as it is.
    pub fn settle(&mut self, seq: SeqId, kept: &[u32]) {
        if let Some(r) = self.rows.get_mut(seq).filter(|r| !r.forks.is_empty()) {
            r.settle(kept);
        }
    }

    /// Takes `seq`'s row back to `pos` computed tokens (never forward): the KV past
    /// it is no longer the sequence's (a draft model's guesses the target did not keep),
    /// and its next chunk starts there and writes over it.
    pub fn rewind(&mut self, seq: SeqId, pos: usize) {
        if let Some(r) = self.rows.get_mut(seq) {
            r.position = r.position.map(|p| p.min(pos));
        }
    }

    /// `Err(DeviceLost)` when the device can run no more work ([`Backend::check_device`]).
    pub fn check_device(&self) -> Result<()> {
        self.model.backend.check_device()
    }

    /// Runs state-slot copies `(src, dst)` in order (snapshots queued after a pass).
    pub fn copy_state_slots(&mut self, copies: &[(u32, u32)]) -> Result<()> {
        if copies.is_empty() {
            return Ok(());
        }
        self.model.copy_state_slots(&mut self.kv, copies)
    }

    /// A pass outside the persistent batch (warm-up), before any row is made: its chunks
    /// take the pool's table rows 0.. and rewrite them ([`ForwardBatch::push`]).
    pub fn forward_raw(&mut self, batch: &ForwardBatch) -> Result<()> {
        if !self.rows.is_empty() {
            return Err(RuntimeError::BadBatch(
                "a pass outside the persistent batch while it has rows would rewrite                  their block tables"
                    .into(),
            ));
        }
        self.model
            .forward_in(&mut self.ws, &mut self.kv, &self.layout, batch)
            .map(|_| ())
    }

    /// Warm-up before any row: a prompt of `n` fixed tokens over `table` (blocks for `n + 1`
    /// positions) in state slot `slot`, then one decode step after it, so weights are paged
    /// in, thread pools started and (on a GPU) kernels loaded and plans made.
    pub fn warm_up(&mut self, n: usize, table: Vec<u32>, slot: u32) -> Result<()> {
        let vocab = self.model.cfg.vocab_size as u32;
        let prompt: Vec<u32> = (0..n as u32).map(|i| (i * 7919 + 13) % vocab).collect();
        let mut b = ForwardBatch::default();
        b.push_in_slot(&prompt, 0, n, table.clone(), slot, true);
        self.forward_raw(&b)?;
        let mut b = ForwardBatch::default();
        b.push_in_slot(&prompt[..1], n, n, table, slot, true);
        self.forward_raw(&b)
    }

    /// One block's KV as its export image (the SSD tier).
    /// Blocks as their images, end to end (one batched copy: `Backend::export_blocks`).
    pub fn export_blocks(&self, blocks: &[u32], out: &mut [u8]) -> Result<()> {
        self.model.backend.export_blocks(&self.kv, blocks, out)
    }

    pub fn import_blocks(&mut self, blocks: &[u32], data: &[u8]) -> Result<()> {
        self.model.backend.import_blocks(&mut self.kv, blocks, data)
    }

    /// State slots as their export image (the SSD tier's snapshots).
    pub fn export_state_slots(&self, slots: &[u32], out: &mut [u8]) -> Result<()> {
        self.model.export_state_slots(&self.kv, slots, out)
    }

    pub fn import_state_slots(&mut self, slots: &[u32], data: &[u8]) -> Result<()> {
        self.model.import_state_slots(&mut self.kv, slots, data)
    }
}

#[cfg(test)]
pub(crate) mod tests;
