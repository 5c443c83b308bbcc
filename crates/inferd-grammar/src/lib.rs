//! Constrained decoding: replies held to a JSON Schema or to a model's tool-call syntax.
//!
//! - [`Grammars`] (one per model) turns the vocabulary into llguidance's token trie
//!   ([`vocab`] has the byte rules) and compiles a request's [`ReplyFormat`] into a
//!   [`Constraint`].
//! - A [`Constraint`] gives the [`TokenMask`] of tokens allowed next and takes each
//!   sampled token; the engine computes masks beside the forward pass and the sampler
//!   applies them.

mod constraint;
mod error;
mod forced;
mod grammars;
mod limits;
mod spec;
pub mod vocab;

pub use constraint::{Constraint, TokenMask, MASK_CPU_LIMIT, MASK_CPU_MEAN_LIMIT};
pub use error::GrammarError;
pub use grammars::Grammars;
pub use limits::SchemaLimits;
pub use spec::{AnswerFormat, CallFormat, ReplyFormat};
