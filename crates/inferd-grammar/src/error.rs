//! Errors of building grammars and of following them.

/// What went wrong with a constraint.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    /// The schema or grammar the client gave cannot be compiled (a 400).
    #[error("{0}")]
    Invalid(String),
    /// This model's vocabulary cannot be constrained.
    #[error("constrained decoding is unavailable for this model: {0}")]
    Vocab(String),
    /// The matcher failed while a reply was being generated.
    #[error("the output constraint failed: {0}")]
    Failed(String),
}
