//! The OpenAI-compatible HTTP API over the serving engine. This is the only crate that
//! knows HTTP and JSON request shapes: it turns requests into [`inferd_engine::GenRequest`]s
//! and the engine's event streams into JSON responses or server-sent events.
//!
//! # Endpoints
//!
//! | method and path               | what                                                   |
//! |-------------------------------|--------------------------------------------------------|
//! | `POST /v1/chat/completions`   | chat (messages rendered by the model's chat template), streamed (SSE) or not |
//! | `POST /v1/completions`        | plain prompt (string, `[string]`, token ids or `[[ids]]`), streamed or not |
//! | `GET /v1/models`              | the loaded model (`owned_by: "inferd"`)                |
//! | `GET /v1/models/{id}`         | that model, or 404 for any other id                    |
//! | `POST /v1/contexts`           | `{id?, messages | prompt, pin = true}`: prefill once, keep (pinned: never evicted) -> `{id, object: "context", tokens, pinned, created}` |
//! | `GET /v1/contexts[/{id}]`     | contexts (tokens, pinned, resident tokens); 404 for an unknown id |
//! | `DELETE /v1/contexts/{id}`    | unpin and forget                                       |
//! | `GET /v1/sessions`, `DELETE /v1/sessions/{id}` | parked sessions                    |
//! | `GET /v1/cache`               | KV blocks/tokens/bytes free, cached, pinned, parked, running, spilled; per context and session |
//! | `GET /health`                 | status, model, uptime, queue, running, KV blocks, preemptions (open, no key) |
//! | `GET /metrics`                | Prometheus text format (open, no key)                  |
//!
//! With an API key configured every `/v1` route needs `Authorization: Bearer KEY`.
//!
//! Parameters: `model` (the served name or an alias; may be omitted), `messages` /
//! `prompt`, `max_tokens` / `max_completion_tokens` (default: the context left after the
//! prompt; capped by the server's cap; generation also ends at the context limit, so a
//! larger value is not an error), `temperature`, `top_p`, `seed`, `presence_penalty`,
//! `frequency_penalty`, `stop` (a string or up to 4), `n` (1 only), `stream`,
//! `stream_options.include_usage`, chat `logprobs` + `top_logprobs` (0..=20), completions
//! `logprobs` (0..=20), `tools` / `tool_choice` (given to the chat template; `"none"`
//! hides them), `chat_template_kwargs`, extensions `top_k`, `min_p`,
//! `repetition_penalty`, and `inferd: {priority, ignore_eos, context, session, cache,
//! max_context, effort}` (unknown keys there are an error; see README "Agent memory").
//! Other unknown top-level fields (`user`, ...) are ignored. Every usage object carries
//! `prompt_tokens_details.cached_tokens`: prompt tokens whose KV came from the cache.
//!
//! # Errors
//!
//! Every error has OpenAI's body `{"error": {"message", "type", "param", "code"}}`.
//!
//! | status | when                                                                        |
//! |--------|-----------------------------------------------------------------------------|
//! | 400    | malformed JSON, invalid UTF-8, empty body, a body that is not an object, a wrong type (OpenAI answers 400, not axum's 422; `param` names the field), missing or empty `messages`/`prompt`, a value out of range, more than 4 stop strings, `n` ≠ 1, unsupported content parts |
//! | 400    | a prompt that does not fit the context: code `context_length_exceeded` (as OpenAI) |
//! | 401    | missing or wrong API key (code `invalid_api_key`, `WWW-Authenticate: Bearer`) |
//! | 404    | unknown `model` (code `model_not_found`); unknown path (code `not_found`); unknown context or session id |
//! | 405    | wrong method on a known path (code `method_not_allowed`)                    |
//! | 422    | the model's chat template rejects well-formed messages (code `chat_template_error`) |
//! | 413    | body over the limit (default 4 MiB; code `request_too_large`); a context too large for the KV budget (code `context_too_large`) |
//! | 429    | the engine's queue is full (code `queue_full`, with `Retry-After`)         |
//! | 500    | the engine failed during generation (in a stream: an error event, then `[DONE]`) |
//! | 503    | the engine is draining (a request read before the stop, handed to it after) or stopped; a prompt that cannot fit beside the pinned contexts (code `kv_cache_pinned`); not admitted within the queue timeout (code `queue_timeout`, with `Retry-After`) |
//!
//! A client that disconnects cancels its request: the response (streamed or not) owns
//! the engine's request stream, and dropping it frees the request's KV blocks.

pub mod anthropic;
pub mod arrival;
pub mod auth;
pub mod config;
pub mod error;
pub mod extract;
pub mod health;
pub mod listen;
pub mod memory;
pub mod metrics;
pub mod openai;
pub mod params;
pub mod pipeline;
pub mod reply;
pub mod request_id;
pub mod responses;
pub mod state;
pub mod strings;
pub mod tree;
pub mod work;
pub mod write_deadline;

use std::future::Future;

use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post, MethodRouter};
use axum::Router;

pub use config::{check_bind, ServerConfig, DEFAULT_MAX_BODY_BYTES};
pub use error::ApiError;
pub use state::AppState;

/// All routes, with auth on `/v1`, JSON 404/405 fallbacks and the body limit.
/// A generation route: its requests announce themselves to the engine once their bodies
/// are read (`arrival.rs`).
fn announced(route: MethodRouter<AppState>) -> MethodRouter<AppState> {
    route.layer(axum::middleware::from_fn(arrival::scope))
}

pub fn router(state: AppState) -> Router {
    metrics::install();
    let limit = state.config.max_body_bytes;
    let v1 = Router::new()
        .route(
            "/v1/chat/completions",
            announced(post(openai::chat::handler)),
        )
        .route(
            "/v1/completions",
            announced(post(openai::completions::handler)),
        )
        .route("/v1/models", get(openai::models::list))
        .route("/v1/models/{*id}", get(openai::models::get))
        .route("/v1/contexts", post(memory::create).get(memory::list))
        .route("/v1/contexts/{id}", get(memory::get).delete(memory::delete))
        .route("/v1/sessions", get(memory::list_sessions))
        .route("/v1/sessions/{id}", delete(memory::delete_session))
        .route("/v1/cache", get(memory::cache))
        .route("/v1/responses", announced(post(responses::create)))
        .route(
            "/v1/responses/{id}",
            get(responses::get).delete(responses::delete),
        )
        .route(
            "/v1/responses/{id}/input_items",
            get(responses::input_items),
        )
        .route("/v1/messages", announced(post(anthropic::messages)))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ));
    Router::new()
        .merge(v1)
        .route("/health", get(health::health))
        .route("/metrics", get(metrics::render))
        .route_layer(axum::middleware::from_fn(metrics::tag_route))
        .fallback(error::fallback_404)
        .method_not_allowed_fallback(error::fallback_405)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn(request_id::stamp))
        .layer(axum::middleware::from_fn(metrics::count))
        .with_state(state)
}

/// Serves until `shutdown` resolves, then stops accepting connections, drains the
/// engine (new requests on open connections get 503, running ones finish) and returns
/// once every open response has completed; connections are held to
/// `ServerConfig::conn` ([`listen`]). The caller then joins the engine (`EngineHandle::shutdown`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut state = state;
    if state.config.address.is_none() {
        let mut cfg = (*state.config).clone();
        cfg.address = listener.local_addr().ok();
        state.config = std::sync::Arc::new(cfg);
    }
    let engine = state.engine.clone();
    let limits = state.config.conn;
    let responses = state.responses.clone();
    let app = router(state);
    let served = listen::run(listener, app, engine, limits, shutdown).await;
    // Stored responses reach the disk before the process exits.
    responses.flush();
    served
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
