//! The Anthropic Messages API: `POST /v1/messages` (whole or streamed) and
//! `POST /v1/messages/count_tokens`. A thin adapter: the body becomes a chat request
//! ([`request::to_chat`]) for the shared [`crate::pipeline`], and the engine's events are
//! written as content blocks ([`message`], [`stream`]). Errors have Anthropic's shape
//! ([`error`]).

pub mod error;
pub mod message;
pub mod request;
pub mod stream;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use self::error::AnthropicError;
use self::request::{rename_param, to_chat, MessagesBody};
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::openai::{collect, oid, sse};
use crate::pipeline::{self, Started};
use crate::reply::{self, ReplyStream};
use crate::state::AppState;

/// A tool call's id as Anthropic spells tool-use ids (`toolu_...`): the generated
/// `call_...` id with Anthropic's prefix, the same random part.
pub fn tool_use_id(call_id: &str) -> String {
    match call_id.strip_prefix("call_") {
        Some(rest) => format!("toolu_{rest}"),
        None => call_id.to_string(),
    }
}

/// Whether a path belongs to this protocol (its errors take Anthropic's shape).
pub fn is_path(path: &str) -> bool {
    path == "/v1/messages" || path.starts_with("/v1/messages/")
}

fn read_body(body: Result<JsonBody, ApiError>) -> Result<MessagesBody, ApiError> {
    body?.read()
}

/// `POST /v1/messages`.
pub async fn messages(
    State(state): State<AppState>,
    body: Result<JsonBody, ApiError>,
) -> Result<Response, AnthropicError> {
    run(state, body).await.map_err(|e| rename_param(e).into())
}

async fn run(state: AppState, body: Result<JsonBody, ApiError>) -> Result<Response, ApiError> {
    let b = read_body(body)?;
    let req = to_chat(&b, false)?;
    let Started {
        stream: rs,
        checked,
        tools,
        prompt_tokens,
        ..
    } = pipeline::start(&state, req).await?;
    let id = oid("msg");
    let model = state.model_name().to_string();
    if checked.stream {
        let fmt =
            stream::MessageStream::new(id, model, prompt_tokens, ReplyStream::new(tools.as_ref()));
        return sse::response(rs, fmt, "messages").await;
    }
    let c = collect(rs, "messages").await?;
    let reply = reply::whole(tools.as_ref(), &c.text);
    let whole = message::Whole {
        id: &id,
        model: &model,
        reply: &reply,
        reason: c.finish_reason,
        stop: c.stop.as_deref(),
        usage: c.usage,
    };
    Ok(Json(whole.json()).into_response())
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens as rendered, nothing generated.
pub async fn count_tokens(
    State(state): State<AppState>,
    body: Result<JsonBody, ApiError>,
) -> Result<Response, AnthropicError> {
    let count = async {
        let b = read_body(body)?;
        let req = to_chat(&b, true)?;
        let p = pipeline::prepare(&state, req).await?;
        Ok::<_, ApiError>(p.gen.prompt.len())
    };
    match count.await {
        Ok(n) => Ok(Json(json!({"input_tokens": n})).into_response()),
        Err(e) => Err(rename_param(e).into()),
    }
}
