//! Agent memory over HTTP: `/v1/contexts` (create, list, get, delete), `/v1/sessions`
//! (list, delete), `/v1/cache` (what the KV cache holds), and how a chat or completion
//! request continues a context.
//!
//! A context remembers how it was made (its messages and their rendered text, or its
//! raw prompt) in the engine's opaque `meta`, so a request naming it can be rendered as
//! the context's conversation followed by the request's messages, with the context's
//! tokens kept exactly as they were prefilled.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use inferd_engine::{CacheReport, ContextInfo, ContextSpec, MemoryError, SessionInfo};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::extract::{IdPath, JsonBody};
use crate::state::AppState;

/// How a context was made (stored as its `meta`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ContextMeta {
    /// The prepared messages, for chat contexts.
    #[serde(default)]
    pub messages: Option<Value>,
    /// The rendered template text of `messages` (or the raw prompt).
    #[serde(default)]
    pub text: String,
}

impl ContextMeta {
    pub fn of(info: &ContextInfo) -> Self {
        serde_json::from_str(&info.meta).unwrap_or_default()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    #[serde(default)]
    id: Option<String>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    messages: Option<Value>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    pin: Option<bool>,
    /// Accepted for symmetry with chat requests; must name the served model.
    #[serde(default)]
    model: Option<String>,
    #[serde(default, deserialize_with = "crate::tree::bounded_map")]
    chat_template_kwargs: Option<serde_json::Map<String, Value>>,
}

/// Engine memory errors as HTTP errors.
pub fn api_error(e: MemoryError) -> ApiError {
    match e {
        MemoryError::NotFound(m) => ApiError::not_found(m),
        MemoryError::TooLarge(m) => ApiError::too_large(m).with_code("context_too_large"),
        MemoryError::Invalid(m) => ApiError::bad_request(m),
        MemoryError::Failed(m) => ApiError::internal(m),
        MemoryError::Deleted(m) => ApiError::conflict(m).with_code("context_deleted"),
        MemoryError::Stopped => ApiError::unavailable("the engine has stopped"),
        MemoryError::DeviceLost(_) => ApiError::unavailable(e.to_string()).with_code("device_lost"),
    }
}

fn context_json(c: &ContextInfo) -> Value {
    let mut v = json!({
        "id": c.id,
        "object": "context",
        "tokens": c.n_tokens,
        "pinned": c.pinned,
        "created": c.created,
        "resident_tokens": c.resident_tokens,
        "resident_blocks": c.resident_blocks,
        "spilled_blocks": c.spilled_blocks,
    });
    if let Some(p) = c.persisted {
        v["persisted"] = p.into();
    }
    v
}

/// `POST /v1/contexts`: prefill once and keep.
pub async fn create(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let b: CreateBody = body.read()?;
    if let Some(m) = &b.model {
        state.check_model(m)?;
    }
    state.check_available()?;
    if let Some(id) = &b.id {
        inferd_engine::check_id("id", id).map_err(|e| ApiError::invalid_param("id", e))?;
    }
    let st = state.clone();
    let (tokens, meta) = match (b.messages, b.prompt) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give either `messages` or `prompt`, not both",
            ))
        }
        (None, None) => {
            return Err(ApiError::bad_request(
                "a context needs `messages` or `prompt`",
            ))
        }
        (Some(m), None) => {
            let kwargs = b.chat_template_kwargs.unwrap_or_default();
            let workers = st.workers.clone();
            workers
                .run(move || {
                    let messages = crate::openai::chat::prepare_messages(Some(&m))?;
                    let text =
                        crate::openai::chat::render_text(&st, &messages, None, false, kwargs)?;
                    let tokens = st.encode(&text, false)?;
                    Ok::<_, ApiError>((
                        tokens,
                        ContextMeta {
                            messages: Some(messages),
                            text,
                        },
                    ))
                })
                .await?
        }
        (None, Some(p)) => {
            if p.is_empty() {
                return Err(ApiError::invalid_param(
                    "prompt",
                    "`prompt` must not be empty",
                ));
            }
            let workers = st.workers.clone();
            let tokens = workers
                .run(move || st.encode(&p, true).map(|t| (t, p)))
                .await?;
            (
                tokens.0,
                ContextMeta {
                    messages: None,
                    text: tokens.1,
                },
            )
        }
    };
    let spec = ContextSpec {
        id: b.id,
        tokens,
        pin: b.pin.unwrap_or(true),
        meta: serde_json::to_string(&meta).unwrap_or_default(),
    };
    let info = state.engine.create_context(spec).await.map_err(api_error)?;
    Ok(Json(context_json(&info)).into_response())
}

/// `GET /v1/contexts`.
pub async fn list(State(state): State<AppState>) -> Result<Response, ApiError> {
    let r = state.engine.cache_report().await.map_err(api_error)?;
    let data: Vec<Value> = r.contexts.iter().map(context_json).collect();
    Ok(Json(json!({"object": "list", "data": data})).into_response())
}

/// `GET /v1/contexts/{id}`.
pub async fn get(State(state): State<AppState>, IdPath(id): IdPath) -> Result<Response, ApiError> {
    let c = state.engine.context(&id).await.map_err(api_error)?;
    Ok(Json(context_json(&c)).into_response())
}

/// `DELETE /v1/contexts/{id}`: unpin and forget.
pub async fn delete(
    State(state): State<AppState>,
    IdPath(id): IdPath,
) -> Result<Response, ApiError> {
    state.engine.delete_context(&id).await.map_err(api_error)?;
    Ok(Json(json!({"id": id, "object": "context.deleted", "deleted": true})).into_response())
}

fn session_json(s: &SessionInfo) -> Value {
    json!({
        "id": s.id,
        "object": "session",
        "tokens": s.tokens,
        "resident_tokens": s.resident_tokens,
        "resident_blocks": s.resident_blocks,
        "spilled_blocks": s.spilled_blocks,
        "last_used": s.last_used,
    })
}

/// `GET /v1/sessions`.
pub async fn list_sessions(State(state): State<AppState>) -> Result<Response, ApiError> {
    let r = state.engine.cache_report().await.map_err(api_error)?;
    let data: Vec<Value> = r.sessions.iter().map(session_json).collect();
    Ok(Json(json!({"object": "list", "data": data})).into_response())
}

/// `DELETE /v1/sessions/{id}`.
pub async fn delete_session(
    State(state): State<AppState>,
    IdPath(id): IdPath,
) -> Result<Response, ApiError> {
    state.engine.delete_session(&id).await.map_err(api_error)?;
    Ok(Json(json!({"id": id, "object": "session.deleted", "deleted": true})).into_response())
}

/// `GET /v1/cache`: tokens and blocks cached, pinned, parked, spilled and free; for
/// hybrid models also the recurrent-state slots and snapshots (`state`).
pub async fn cache(State(state): State<AppState>) -> Result<Response, ApiError> {
    let r = state.engine.cache_report().await.map_err(api_error)?;
    let mut v = cache_json(&r);
    v["responses"] = state.responses.report();
    Ok(Json(v).into_response())
}

fn cache_json(r: &CacheReport) -> Value {
    let bs = r.block_size;
    let part = |blocks: usize| json!({"blocks": blocks, "tokens": blocks * bs, "bytes": blocks as u64 * r.bytes_per_block});
    json!({
        "object": "cache",
        "block_size": bs,
        "bytes_per_block": r.bytes_per_block,
        "kv_dtype": r.kv_dtype,
        "total": part(r.blocks_total),
        "free": part(r.blocks_free),
        "cached": part(r.blocks_cached),
        "pinned": part(r.blocks_pinned),
        "parked": part(r.blocks_parked),
        "running": part(r.blocks_running),
        "spilled": {"blocks": r.blocks_spilled, "tokens": r.blocks_spilled * bs, "bytes": r.bytes_spilled, "write_errors": r.spill_write_errors},
        "state": state_json(r),
        "contexts": r.contexts.iter().map(context_json).collect::<Vec<_>>(),
        "sessions": r.sessions.iter().map(session_json).collect::<Vec<_>>(),
    })
}

/// Hybrid models' recurrent-state group: slots, and snapshots by where they are (all
/// zero for dense models).
fn state_json(r: &CacheReport) -> Value {
    let b = r.bytes_per_snapshot;
    let part = |n: usize| json!({"snapshots": n, "bytes": n as u64 * b});
    json!({
        "bytes_per_snapshot": b,
        "slots": {"total": r.state_slots_total, "free": r.state_slots_free,
                  "bytes": r.state_slots_total as u64 * b},
        "snapshots": {"snapshots": r.snapshots, "bytes": r.snapshot_bytes},
        "pinned": part(r.snapshots_pinned),
        "parked": part(r.snapshots_parked),
        "spilled": {"snapshots": r.snapshots_spilled, "bytes": r.snapshot_bytes_spilled},
    })
}

/// The prompt of a request continuing context `ctx`: the context's tokens as prefilled,
/// then the tokens of what the request adds. `text` is the request's full rendering
/// (context included) for chat contexts, or just its own text otherwise.
pub fn continue_context(
    state: &AppState,
    ctx: &ContextInfo,
    text: &str,
) -> Result<Vec<u32>, ApiError> {
    let meta = ContextMeta::of(ctx);
    let rest = if meta.messages.is_some() {
        match text.strip_prefix(meta.text.as_str()) {
            Some(rest) => rest,
            // The template rendered the context differently inside the longer
            // conversation: tokenize it all; the prefix cache still finds what matches.
            None => return state.encode(text, false),
        }
    } else {
        text
    };
    let mut tokens = ctx.tokens.clone();
    tokens.extend(state.encode(rest, false)?);
    Ok(tokens)
}
