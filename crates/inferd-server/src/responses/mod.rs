//! The OpenAI Responses API: `POST /v1/responses` (whole or streamed), and the stored
//! responses: `GET` / `DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items`.
//! A thin adapter: the body becomes a chat request ([`request::translate`]) for the
//! shared [`crate::pipeline`], and the engine's events become output items
//! ([`output`], [`stream`]).
//!
//! Conversation state: a response is stored (`store`, default true) with the whole
//! conversation as chat messages and the engine session its chain runs in (the first
//! response's id). `previous_response_id` continues from there: the conversation is
//! rendered again and the session's parked KV (in memory, or from the SSD tier after a
//! restart) is reused, which `usage.input_tokens_details.cached_tokens` shows.
//! [`store::ResponseStore`] is the one owner of this state.

pub mod output;
pub mod persist;
pub mod request;
pub mod store;
pub mod stream;

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use self::output::{echo_fields, Echo, Ending, Item};
use self::request::{rename_param, translate, ResponsesBody};
use self::store::Stored;
use crate::error::ApiError;
use crate::extract::{IdPath, JsonBody};
use crate::openai::oid;
use crate::openai::{collect, now_secs, sse};
use crate::pipeline::{self, Started};
use crate::reply::{self, ReplyStream};
use crate::state::AppState;

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("No response found with id '{id}'."))
}

/// What is stored once the reply is complete.
struct Keep {
    state: AppState,
    id: String,
    items: Vec<Value>,
    conversation: Vec<Value>,
    /// Taken by [`Keep::save`]: one left here at the drop was never stored.
    session: String,
}

impl Keep {
    fn save(mut self, response: &Value, items: &[Item]) {
        self.conversation.push(output::as_message(items));
        let stored = Stored {
            response: response.clone(),
            input_items: std::mem::take(&mut self.items),
            conversation: std::mem::take(&mut self.conversation),
            session: std::mem::take(&mut self.session),
            created: now_secs(),
        };
        let freed = self.state.responses.put(&self.id, stored);
        release(&self.state, freed);
        // The reply tells the client the response exists: it must be on disk before, or a
        // kill right after the reply loses it. One fsync, kept off the async workers where
        // the runtime allows it (the streamed reply calls this from its formatting).
        let flush = || self.state.responses.flush();
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(flush)
            }
            _ => flush(),
        }
    }
}

impl Drop for Keep {
    /// A reply that never completed (the client left, the engine failed) is not stored.
    /// A chain's first turn named its session after the response, which nothing will
    /// name again: the session goes with it (the engine parks nothing for it, even if
    /// the turn still runs). A later turn's session is the chain's, and stays.
    fn drop(&mut self) {
        if self.session == self.id {
            release(&self.state, vec![std::mem::take(&mut self.session)]);
        }
    }
}

/// Releases the engine sessions of expired or deleted response chains (only the ones
/// this API made: a session named by the client in `inferd.session` stays).
fn release(state: &AppState, sessions: Vec<String>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return; // no runtime: the server is going away
    };
    for s in sessions.into_iter().filter(|s| s.starts_with("resp_")) {
        let engine = state.engine.clone();
        rt.spawn(async move {
            let _ = engine.delete_session(&s).await;
        });
    }
}

/// `POST /v1/responses`.
pub async fn create(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let b: ResponsesBody = body.read()?;
    drop(body);
    let store = b.store.unwrap_or(true);
    let prev = match &b.previous_response_id {
        Some(id) => Some(state.responses.get(id).ok_or_else(|| {
            ApiError::not_found(format!("Previous response with id '{id}' not found."))
                .with_param("previous_response_id")
                .with_code("previous_response_not_found")
        })?),
        None => None,
    };
    let id = oid("resp");
    let session = prev
        .as_ref()
        .map(|p| p.session.clone())
        .or_else(|| store.then(|| id.clone()));
    let history = prev.map(|p| p.conversation.clone()).unwrap_or_default();
    let t = translate(&b, &history, session).map_err(rename_param)?;
    let Started {
        stream: rs,
        checked,
        tools,
        ..
    } = pipeline::start(&state, t.chat)
        .await
        .map_err(rename_param)?;
    let echo = Echo {
        id: id.clone(),
        created_at: now_secs(),
        model: state.model_name().to_string(),
        fields: echo_fields(&b),
    };
    drop(b);
    let mut conversation = history;
    conversation.extend(t.messages);
    let keep = store.then(|| Keep {
        state: state.clone(),
        id,
        items: t.items,
        conversation,
        session: checked.session.clone().unwrap_or_default(),
    });
    if checked.stream {
        let on_done = Box::new(move |r: &Value, items: &[Item]| {
            if let Some(k) = keep {
                k.save(r, items);
            }
        });
        let fmt = stream::ResponseStream::new(echo, ReplyStream::new(tools.as_ref()), on_done);
        return sse::response(rs, fmt, "input").await;
    }
    let c = collect(rs, "input").await?;
    let items = output::items(&reply::whole(tools.as_ref(), &c.text));
    let r = echo.response(
        &items,
        Some(Ending {
            reason: c.finish_reason,
            usage: &c.usage,
        }),
    );
    if let Some(k) = keep {
        k.save(&r, &items);
    }
    Ok(Json(r).into_response())
}

/// `GET /v1/responses/{id}`.
pub async fn get(State(state): State<AppState>, IdPath(id): IdPath) -> Result<Response, ApiError> {
    let s = state.responses.get(&id).ok_or_else(|| not_found(&id))?;
    Ok(Json(s.response.clone()).into_response())
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(
    State(state): State<AppState>,
    IdPath(id): IdPath,
) -> Result<Response, ApiError> {
    let freed = state.responses.remove(&id).ok_or_else(|| not_found(&id))?;
    release(&state, freed.into_iter().collect());
    Ok(Json(json!({"id": id, "object": "response", "deleted": true})).into_response())
}

/// `GET /v1/responses/{id}/input_items?order=asc|desc&limit=N&after=ID`.
pub async fn input_items(
    State(state): State<AppState>,
    IdPath(id): IdPath,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let s = state.responses.get(&id).ok_or_else(|| not_found(&id))?;
    let mut items = s.input_items.clone();
    match q.get("order").map(String::as_str) {
        None | Some("desc") => items.reverse(),
        Some("asc") => {}
        Some(_) => {
            return Err(ApiError::invalid_param(
                "order",
                "`order` must be asc or desc",
            ))
        }
    }
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => 20,
        Some(Ok(n)) if (1..=100).contains(&n) => n,
        Some(_) => {
            return Err(ApiError::invalid_param(
                "limit",
                "`limit` must be an integer from 1 to 100",
            ))
        }
    };
    if let Some(after) = q.get("after") {
        let at = items
            .iter()
            .position(|i| i["id"].as_str() == Some(after.as_str()))
            .ok_or_else(|| ApiError::invalid_param("after", format!("no input item '{after}'")))?;
        items.drain(..=at);
    }
    let has_more = items.len() > limit;
    items.truncate(limit);
    let first = items
        .first()
        .map(|i| i["id"].clone())
        .unwrap_or(Value::Null);
    let last = items.last().map(|i| i["id"].clone()).unwrap_or(Value::Null);
    let body = json!({"object": "list", "data": items, "first_id": first, "last_id": last,
        "has_more": has_more});
    Ok((StatusCode::OK, Json(body)).into_response())
}
