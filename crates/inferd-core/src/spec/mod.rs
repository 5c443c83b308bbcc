//! Speculative decoding's policy side: where draft tokens come from and how many a
//! sequence proposes. The engine asks a sequence's [`NgramDrafter`] for up to
//! [`SpecConfig::max_draft`] tokens, the scheduler gives them room beside the decode
//! (within [`crate::sched::SchedulerConfig::draft_budget`]), the model checks them all
//! in one pass, and the engine keeps the longest prefix the model itself draws.
//!
//! Verification draws every position with the sequence's own sampler as plain
//! decoding would (the same random state, the same history), and keeps a draft token
//! only where the draw equals it: with a draft that is one fixed guess, this is exact
//! speculative sampling, so the reply is the one plain decoding gives, token for token,
//! under greedy and seeded sampling alike.

mod backoff;
mod length;
mod ngram;

pub use backoff::Backoff;
pub use length::DraftLength;
pub use ngram::NgramDrafter;

/// Copy (n-gram) drafting: the tokens that followed the latest earlier occurrence of
/// the sequence's last `n` tokens, the longest `n` in `min_ngram ..= max_ngram` that
/// occurred before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecConfig {
    /// Draft tokens a sequence proposes at most per step.
    pub max_draft: usize,
    /// Shortest suffix matched.
    pub min_ngram: usize,
    /// Longest suffix matched (a longer match is tried first).
    pub max_ngram: usize,
}

impl Default for SpecConfig {
    fn default() -> Self {
        SpecConfig {
            max_draft: 4,
            min_ngram: 2,
            max_ngram: 4,
        }
    }
}

impl SpecConfig {
    /// Why the configuration cannot run, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.max_draft == 0 || self.max_draft > 32 {
            return Err(format!(
                "draft tokens must be 1 to 32, not {}",
                self.max_draft
            ));
        }
        if self.min_ngram == 0 || self.min_ngram > self.max_ngram || self.max_ngram > 16 {
            return Err(format!(
                "n-gram sizes must satisfy 1 <= min ({}) <= max ({}) <= 16",
                self.min_ngram, self.max_ngram
            ));
        }
        Ok(())
    }
}
