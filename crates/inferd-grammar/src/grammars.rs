//! Per model: the vocabulary trie and the llguidance factory that compiles grammars
//! against it. Built once at start-up; compiling a request's grammar is then a few ms.

use std::sync::Arc;
use std::time::Duration;

use inferd_text::Tokenizer;
use llguidance::{Matcher, ParserFactory};

use crate::constraint::MaskCpuLimits;
use crate::error::brief;
use crate::limits::SchemaLimits;
use crate::spec::ReplyFormat;
use crate::vocab::Vocab;
use crate::{Constraint, GrammarError};

/// Compiles [`ReplyFormat`]s into [`Constraint`]s for one model. Cheap to clone.
#[derive(Clone)]
pub struct Grammars {
    factory: Arc<ParserFactory>,
    limits: SchemaLimits,
    /// What a reply's masks may cost ([`MaskCpuLimits::DEFAULT`] unless set).
    mask_cpu: MaskCpuLimits,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars").finish_non_exhaustive()
    }
}

impl Grammars {
    /// For a model with `n_vocab` logits and this tokenizer.
    pub fn new(tokenizer: Arc<Tokenizer>, n_vocab: usize) -> Result<Self, GrammarError> {
        let env = Vocab::new(tokenizer, n_vocab)?.into_env();
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| GrammarError::Vocab(format!("building the token trie: {e}")))?;
        factory.quiet();
        // An object's optional properties each put about four items in a parser row, and
        // llguidance's default bound (2000) fails replies to objects of 500 or more
        // (SchemaLimits allows 1000) at their first token; 1000 of them cost about 2 ms a
        // mask, 7 at worst, on SmolLM2's vocabulary (`forced_run_costs`).
        factory.limits_mut().max_items_in_row = 4 * SchemaLimits::DEFAULT.max_properties + 1000;
        Ok(Grammars {
            factory: Arc::new(factory),
            limits: SchemaLimits::DEFAULT,
            mask_cpu: MaskCpuLimits::DEFAULT,
        })
    }

    /// The same, holding schemas to other limits (measurements of what the limits keep
    /// out).
    pub fn with_schema_limits(mut self, limits: SchemaLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The same, with other bounds on one mask's CPU time and on the recent masks' mean.
    pub fn with_mask_cpu_limits(mut self, one: Duration, mean: Duration) -> Self {
        self.mask_cpu = MaskCpuLimits { one, mean };
        self
    }

    /// A fresh constraint for one reply; an error says what is wrong with the format.
    /// The first mask is computed here, so a grammar that fails only once used (one that
    /// admits nothing) fails now, before the request is answered.
    pub fn compile(&self, format: &ReplyFormat) -> Result<Constraint, GrammarError> {
        let grammar = format.grammar(&self.limits)?;
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| GrammarError::Invalid(brief(&e.to_string())))?;
        let mut matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError::Invalid(brief(&e)));
        }
        match matcher.compute_mask() {
            Ok(m) if !m.is_zero() => {}
            _ => {
                return Err(GrammarError::Invalid(
                    "no JSON value satisfies the schema (no reply could even begin)".into(),
                ))
            }
        }
        Ok(Constraint::new(matcher, self.mask_cpu))
    }

    /// Logits the model has (the masks' length).
    pub fn vocab_size(&self) -> usize {
        self.factory.tok_env().tok_trie().vocab_size()
    }
}
