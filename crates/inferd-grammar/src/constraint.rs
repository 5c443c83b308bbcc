//! One reply's constraint: the grammar's state as tokens are committed, and the mask of
//! tokens allowed next.

use std::time::Duration;

use llguidance::Matcher;
use toktrie::SimpleVob;

use crate::GrammarError;

/// The CPU time one mask may take before its reply is failed ([`Grammars`]'s default).
/// Schemas within [`crate::SchemaLimits`] stay far below it (about 7 ms a mask at 1000
/// optional properties on SmolLM2's vocabulary); a grammar that still costs more holds
/// up every sequence of the step it is masked in, once, not for the rest of its reply.
///
/// [`Grammars`]: crate::Grammars
pub const MASK_CPU_LIMIT: Duration = Duration::from_millis(100);

/// The mean CPU time of a reply's last [`RECENT_MASKS`] masks past which it fails: a
/// grammar whose every mask is heavy (a chain of long forced runs, each within the
/// schema limits) would slow every step of its reply.
pub const MASK_CPU_MEAN_LIMIT: Duration = Duration::from_millis(25);

/// How many of a reply's latest masks [`MASK_CPU_MEAN_LIMIT`] averages over.
const RECENT_MASKS: usize = 16;

/// What a reply's masks may cost in CPU time: one of them, and the latest
/// [`RECENT_MASKS`] on average.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MaskCpuLimits {
    pub one: Duration,
    pub mean: Duration,
}

impl MaskCpuLimits {
    pub const DEFAULT: MaskCpuLimits = MaskCpuLimits {
        one: MASK_CPU_LIMIT,
        mean: MASK_CPU_MEAN_LIMIT,
    };
}

/// CPU time of the calling thread: a mask's cost, whatever else the machine runs.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out pointer; the thread CPU clock exists on every supported OS.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A reply's grammar state. Call [`mask`](Constraint::mask) before sampling and
/// [`commit`](Constraint::commit) with the chosen token; `Send`, so masks can be
/// computed on another thread while the model runs.
pub struct Constraint {
    matcher: Matcher,
    limits: MaskCpuLimits,
    /// CPU time of the latest masks, a ring.  // [RECENT_MASKS]
    recent: [Duration; RECENT_MASKS],
    /// Masks computed so far.
    masks: usize,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("finished", &self.matcher.is_stopped())
            .finish()
    }
}

impl Clone for Constraint {
    /// A copy with its own state (a request that is retried starts from the same point).
    fn clone(&self) -> Self {
        Constraint {
            matcher: self.matcher.deep_clone(),
            limits: self.limits,
            recent: self.recent,
            masks: self.masks,
        }
    }
}

/// Which token ids may come next: a bitset over the model's vocabulary.
#[derive(Clone, Debug)]
pub struct TokenMask(SimpleVob);

impl TokenMask {
    /// Bit `t % 32` of word `t / 32` is set when token `t` is allowed.  // [ceil(vocab / 32)]
    pub fn words(&self) -> &[u32] {
        self.0.as_slice()
    }

    pub fn allows(&self, token: u32) -> bool {
        (token as usize) < self.0.len() && self.0.is_allowed(token)
    }

    /// How many tokens are allowed.
    pub fn count(&self) -> usize {
        self.0.num_set()
    }
}

impl Constraint {
    pub(crate) fn new(matcher: Matcher, limits: MaskCpuLimits) -> Self {
        Constraint {
            matcher,
            limits,
            recent: [Duration::ZERO; RECENT_MASKS],
            masks: 0,
        }
    }

    /// The tokens allowed next. Once the grammar is complete only end-of-sequence ids are.
    /// A mask that took more CPU time than the limit fails the reply, and so do masks
    /// whose recent mean does.
    pub fn mask(&mut self) -> Result<TokenMask, GrammarError> {
        let started = thread_cpu_time();
        let m = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| GrammarError::Failed(crate::error::brief(&e.to_string())))?;
        let took = thread_cpu_time().saturating_sub(started);
        if took > self.limits.one {
            return Err(GrammarError::Failed(format!(
                "one token's mask took {:.0} ms of CPU (limit {} ms): the reply's format is \
                 too costly to enforce",
                took.as_secs_f64() * 1e3,
                self.limits.one.as_millis()
            )));
        }
        self.recent[self.masks % RECENT_MASKS] = took;
        self.masks += 1;
        let mean = self.recent.iter().sum::<Duration>() / RECENT_MASKS as u32;
        if self.masks >= RECENT_MASKS && mean > self.limits.mean {
            return Err(GrammarError::Failed(format!(
                "the reply's last {RECENT_MASKS} masks took {:.1} ms of CPU each on average \
                 (limit {} ms): the reply's format is too costly to enforce",
                mean.as_secs_f64() * 1e3,
                self.limits.mean.as_millis()
            )));
        }
        if m.is_zero() {
            return Err(GrammarError::Failed(
                "no token can continue the reply".into(),
            ));
        }
        Ok(TokenMask(m))
    }

    /// Advances the grammar by the sampled token (an allowed one).
    pub fn commit(&mut self, token: u32) -> Result<(), GrammarError> {
        self.matcher
            .consume_token(token)
            .map_err(|e| GrammarError::Failed(crate::error::brief(&e.to_string())))
    }

    /// How many of `tokens`, in order from the current state, the grammar allows (the
    /// state is left as it was): a speculative draft is cut to these.
    pub fn valid_prefix(&mut self, tokens: &[u32]) -> usize {
        self.matcher.validate_tokens(tokens).unwrap_or(0)
    }

    /// The masks a speculative draft's positions are drawn under: the mask after each
    /// of `draft`'s first `i` tokens, for `i` in `1 ..= draft.len()` (the draft must be
    /// [`valid_prefix`](Constraint::valid_prefix)), the state then put back. Stops at
    /// the first position with no mask (the reply cannot go on there), so it may return
    /// fewer.
    pub fn draft_masks(&mut self, draft: &[u32]) -> Vec<TokenMask> {
        let mut masks = Vec::with_capacity(draft.len());
        let mut committed = 0;
        for &t in draft {
            if self.commit(t).is_err() {
                break;
            }
            committed += 1;
            match self.mask() {
                Ok(m) => masks.push(m),
                Err(_) => break,
            }
        }
        if self.matcher.rollback(committed).is_err() {
            // Not expected (every commit here succeeded); the reply's next mask reports it.
            masks.clear();
        }
        masks
    }

    /// The grammar is complete and nothing may follow (only end of sequence).
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// The grammar could end here (end of sequence is allowed).
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }
}
