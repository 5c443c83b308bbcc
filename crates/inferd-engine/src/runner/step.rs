//! The typed contract between the engine loop and the [`super::ModelRunner`]: what one
//! step asks of the runner, and what comes back.
//!
//! A step is a diff against the runner's persistent batch plus the pass itself:
//!
//! - [`StepInput::new`]: sequences admitted for the first time get a row (sampler,
//!   DRY history); [`StepInput::finished`]: rows of sequences that ended since the last
//!   step are dropped; [`StepInput::preempted`]: their KV is gone, so their block table
//!   and position are cleared (the sampler, with its random state, stays: the sequence
//!   resumes with the same draws);
//! - [`StepInput::block_copies`] / [`StepInput::state_copies`]: what the KV manager
//!   queued (a shared block copied, a snapshot restored), run in order before the pass;
//! - [`StepInput::chunks`]: the pass, in the scheduler's order (decodes first); each
//!   chunk names only the blocks appended to its sequence's table since its previous
//!   chunk, and a decode's input may be a placeholder, [`ChunkTokens::LastDrawn`]: the
//!   token the row drew at its previous step, filled in by the runner, so a step can be
//!   laid out before the engine has seen the token (what overlapping steps needs).
//!
//! The runner answers [`StepOutput`]: per sampling row the engine asked to draw (a
//! [`Draw`]), the token and the logprobs asked for, never logits.

use std::sync::Arc;

use inferd_core::kv::SeqId;
use inferd_core::sampling::{Sampled, SamplingParams};
use inferd_grammar::TokenMask;
use inferd_text::Tokenizer;

/// A sequence entering the persistent batch.
pub(crate) struct NewRow {
    pub seq: SeqId,
    pub prompt_len: usize,
    pub sampling: SamplingParams,
    /// With DRY on: the tokenizer, to tell which sampled tokens are sequence breakers.
    pub dry_tokenizer: Option<Arc<Tokenizer>>,
}

/// A chunk's input tokens.
pub(crate) enum ChunkTokens {
    /// These tokens.  // [n_tokens]
    Known(Vec<u32>),
    /// One token: the one the row drew last (a decode of a generated token).
    LastDrawn,
}

impl ChunkTokens {
    pub fn len(&self) -> usize {
        match self {
            ChunkTokens::Known(t) => t.len(),
            ChunkTokens::LastDrawn => 1,
        }
    }
}

/// One sequence's tokens in the pass: positions `start_pos .. start_pos + tokens.len()`.
pub(crate) struct StepChunk {
    pub seq: SeqId,
    pub start_pos: usize,
    pub tokens: ChunkTokens,
    /// Blocks appended to the sequence's table since its previous chunk (all of them at
    /// (re)admission), from `ScheduledChunk::new_blocks`.
    pub new_blocks: Vec<u32>,
    /// The recurrent-state slot it runs in (hybrid models; 0 otherwise).
    pub state_slot: u32,
    /// Its last token's logits are wanted (a sampling row, in chunk order).
    pub samples: bool,
    /// Speculative decoding: its last `drafts` tokens are guesses, and each of its
    /// `1 + drafts` positions is a sampling row (in order).
    pub drafts: usize,
}

/// One step: the diff, then the pass.
#[derive(Default)]
pub(crate) struct StepInput {
    pub new: Vec<NewRow>,
    pub finished: Vec<SeqId>,
    pub preempted: Vec<SeqId>,
    /// Block copies `(src, dst)`, before the pass.
    pub block_copies: Vec<(u32, u32)>,
    /// State-slot copies `(src, dst)`, in order, before the pass.
    pub state_copies: Vec<(u32, u32)>,
    pub chunks: Vec<StepChunk>,
}

/// A sampling row the engine wants drawn: the sequence's token history (penalties, DRY)
/// and its grammar mask for this step.
pub(crate) struct Draw<'a> {
    pub seq: SeqId,
    /// Its prompt and generated tokens so far.  // [prompt_len], [generated]
    pub prompt: &'a [u32],
    pub generated: &'a [u32],
    pub mask: Option<TokenMask>,
    /// Its chunk's draft tokens (speculative decoding): `1 + drafts.len()` tokens are
    /// drawn, the `i`-th as plain decoding would draw it had `drafts[..i]` been drawn
    /// before it (its sampler's state that many draws on, that history, DRY's breakers
    /// and the grammar's mask after them); [`super::ModelRunner::settle`] then says which
    /// were kept.
    pub drafts: &'a [u32],
    /// Under a grammar: the mask of each draft position (the `i`-th after `drafts[..=i]`);
    /// positions past them (the reply could not go on) are drawn under the last one, and
    /// not taken.
    pub draft_masks: &'a [TokenMask],
}

/// What a step returns: the tokens drawn for the step's `draws`, in order (a draw with
/// drafts has `1 + drafts.len()` of them).
#[derive(Debug, Default)]
pub(crate) struct StepOutput {
    pub sampled: Vec<(SeqId, Sampled)>,
}
