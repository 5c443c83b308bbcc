//! Per model: the vocabulary trie and the llguidance factory that compiles grammars
//! against it. Built once at start-up; compiling a request's grammar is then a few ms.

use std::sync::Arc;

use inferd_text::Tokenizer;
use llguidance::{Matcher, ParserFactory};

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
        Ok(Grammars {
            factory: Arc::new(factory),
            limits: SchemaLimits::DEFAULT,
        })
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
        Ok(Constraint::new(matcher))
    }

    /// Logits the model has (the masks' length).
    pub fn vocab_size(&self) -> usize {
        self.factory.tok_env().tok_trie().vocab_size()
    }
}
