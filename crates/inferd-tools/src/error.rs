//! The request-side error: which parameter is wrong, and why.

/// A tool-related request parameter is invalid. The server answers 400 with `param`
/// in the OpenAI error body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// The parameter's path in the request body, e.g. `tools[2].function.name` or
    /// `messages[3].tool_call_id`.
    pub param: String,
    /// A sentence for the client; it names the parameter too.
    pub message: String,
}

impl ToolError {
    pub(crate) fn new(param: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError {
            param: param.into(),
            message: message.into(),
        }
    }
}
