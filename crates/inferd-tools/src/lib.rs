//! OpenAI tool calling without a model or HTTP: the request side (`tools`,
//! `tool_choice`, tool messages) and the model side (finding tool calls in a reply,
//! complete or streamed).
//!
//! - [`ToolRequest::parse`] and [`check_messages`] check a request's tool fields; a
//!   [`ToolError`] names the bad parameter (`tools[2].function.name`).
//! - [`ToolSyntax`] is how a model family writes calls (Hermes/Qwen `<tool_call>`,
//!   Llama 3 JSON); [`ToolSyntax::detect`] reads it off the chat template.
//! - [`parse()`] splits a finished reply into content and [`ToolCall`]s.
//! - [`ToolStream`] does the same as the reply is generated, emitting
//!   [`StreamEvent`]s: content as soon as it cannot be part of a call, and each call's
//!   arguments in pieces whose concatenation is exactly what [`parse()`] returns.
//!
//! Arguments are the compact JSON text of the model's arguments object (what
//! `serde_json::to_string` writes for it, key order kept), so clients can rely on the
//! text being valid JSON.

mod call;
mod error;
mod ids;
mod json;
mod messages;
mod parse;
mod request;
mod stream;
mod syntax;

pub use error::ToolError;
pub use ids::CallIds;
pub use messages::check_messages;
pub use parse::{parse, parse_with_ids, Parsed, ToolCall};
pub use request::{valid_name, Tool, ToolChoice, ToolRequest, MAX_NAME_LEN};
pub use stream::{StreamEvent, ToolStream};
pub use syntax::ToolSyntax;
