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

/// The first line of one of llguidance's messages, without the parser state or grammar
/// text some of them append, and at most 300 bytes: what a client may be shown.
pub(crate) fn brief(msg: &str) -> String {
    // An assertion inside llguidance (caught there) says nothing a client can act on.
    if msg.starts_with("panic") {
        return "the constraint engine failed on this grammar (an internal limit)".into();
    }
    let mut end = msg.len();
    for cut in ["\n", "<state>", "<grammar>"] {
        if let Some(i) = msg.find(cut) {
            end = end.min(i);
        }
    }
    let mut s = msg[..end].trim_end();
    if s.len() > 300 {
        let mut i = 300;
        while !s.is_char_boundary(i) {
            i -= 1;
        }
        s = &s[..i];
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn briefs_drop_parser_dumps() {
        assert_eq!(
            brief("NoExtensionBias\n<state>\nTokens: []</state><grammar>\nstart: x\n</grammar>"),
            "NoExtensionBias"
        );
        assert_eq!(brief("bad <grammar>start: x</grammar>"), "bad");
        assert_eq!(brief(&"é".repeat(400)).len(), 300);
        assert!(
            brief("panic: assertion failed: grammar.symbols.len() < u16::MAX")
                .contains("an internal limit")
        );
    }
}
