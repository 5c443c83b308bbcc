//! One reply's constraint: the grammar's state as tokens are committed, and the mask of
//! tokens allowed next.

use llguidance::Matcher;
use toktrie::SimpleVob;

use crate::GrammarError;

/// A reply's grammar state. Call [`mask`](Constraint::mask) before sampling and
/// [`commit`](Constraint::commit) with the chosen token; `Send`, so masks can be
/// computed on another thread while the model runs.
pub struct Constraint {
    matcher: Matcher,
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
    pub(crate) fn new(matcher: Matcher) -> Self {
        Constraint { matcher }
    }

    /// The tokens allowed next. Once the grammar is complete only end-of-sequence ids are.
    pub fn mask(&mut self) -> Result<TokenMask, GrammarError> {
        let m = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| GrammarError::Failed(crate::error::brief(&e.to_string())))?;
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
