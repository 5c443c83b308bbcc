//! The OpenAI-compatible endpoints.

pub mod chat;
pub mod completions;
pub mod format;
pub mod logprobs;
pub mod models;
pub mod prompt;
pub mod sse;
pub mod tools;
pub mod types;

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use inferd_engine::{Event, FinishReason, GenRequest, RequestStream, TokenOut, Usage};

use crate::error::ApiError;
use crate::state::AppState;

/// A response id such as `chatcmpl-5f0c…`: random per process, then a counter.
pub fn new_id(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    format!("{prefix}-{:016x}{n:06x}", h.finish())
}

/// An id in the style of OpenAI's newer APIs and Anthropic's (`resp_…`, `msg_…`, `req_…`).
pub fn oid(prefix: &str) -> String {
    new_id(prefix).replacen('-', "_", 1)
}

/// Unix seconds, for `created`.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub fn fingerprint() -> String {
    format!("inferd-{}", env!("CARGO_PKG_VERSION"))
}

/// Submits to the engine; refusals become HTTP errors (`param` names the prompt field).
pub fn submit(state: &AppState, req: GenRequest, param: &str) -> Result<RequestStream, ApiError> {
    state
        .engine
        .submit_arrived(req, crate::arrival::take())
        .map_err(|e| ApiError::from_submit(e, param))
}

/// A whole (non-streamed) generation.
pub struct Collected {
    pub text: String,
    pub tokens: Vec<TokenOut>,
    pub finish_reason: FinishReason,
    pub usage: Usage,
    /// The stop string that ended the reply, if one did.
    pub stop: Option<String>,
}

/// Reads a request's stream to the end. If the client disconnects, this future is dropped
/// with the stream, which cancels the request.
/// `param` names the prompt's field if the engine refuses the request.
pub async fn collect(mut rs: RequestStream, param: &str) -> Result<Collected, ApiError> {
    let mut text = String::new();
    let mut tokens = Vec::new();
    loop {
        match rs.next().await {
            Some(Event::Delta(d)) => {
                text.push_str(&d.text);
                tokens.extend(d.tokens);
            }
            Some(Event::Done {
                finish_reason,
                usage,
                stop,
            }) => {
                return Ok(Collected {
                    text,
                    tokens,
                    finish_reason,
                    usage,
                    stop,
                })
            }
            Some(Event::Error(m)) => return Err(ApiError::internal(m)),
            Some(Event::Rejected(e)) => return Err(ApiError::from_submit(e, param)),
            None => {
                return Err(ApiError::internal(
                    "the engine stopped before the request finished",
                ))
            }
        }
    }
}
