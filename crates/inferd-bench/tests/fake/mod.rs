//! A scripted fake OpenAI-compatible streaming server for the workload tests: tokens at
//! scripted times, scripted failures, cached tokens and prefill stalls. It also speaks inferd's
//! agent extensions (`/v1/contexts`, `inferd.session`, `inferd.context`) unless scripted not to,
//! answers a request carrying `response_format` with a JSON object, and records what it was
//! sent.

#![allow(dead_code)] // each test binary uses part of it

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use inferd_bench::{BenchReport, Client, ClientConfig, Workload};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Timing tests must not overlap on a small machine.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Clone, Default)]
pub struct Script {
    pub ttft: Duration,
    pub gap: Duration,
    /// Fail the n-th (1-based) generation request (max_tokens > 1) with HTTP 500.
    pub fail_nth: Option<usize>,
    /// Prompts of at least this many tokens "prefill" for `prefill` and stall every stream.
    pub long_threshold: Option<u64>,
    pub prefill: Duration,
    /// End streams without `data: [DONE]`.
    pub no_done: bool,
    /// `usage.prompt_tokens_details.cached_tokens` of the n-th (1-based) generation request:
    /// entry n-1 (no details when there is none; a request continuing a context then reports
    /// the context's tokens as cached).
    pub cached: Vec<u64>,
    /// Answer 404 on `/v1/contexts`, like a server without inferd's extensions.
    pub no_extensions: bool,
    /// Answer 404 to chat requests that name a context (as if it were gone).
    pub forget_contexts: bool,
    /// How long `POST /v1/contexts` takes.
    pub context_delay: Duration,
}

#[derive(Default)]
pub struct Shared {
    pub script: Script,
    pub generations: AtomicUsize,
    /// Streams may not emit a token before this instant (a long prefill is running).
    pub blocked_until: Mutex<Option<Instant>>,
    /// The system message of every generation request (to check agents' prompts differ).
    pub systems: Mutex<Vec<String>>,
    /// Every generation request's body, in arrival order.
    pub bodies: Mutex<Vec<Value>>,
    /// Contexts: id -> prompt tokens.
    pub contexts: Mutex<HashMap<String, u64>>,
    /// "POST id", "DELETE id" and "gen" (a generation request arrived), in order.
    pub events: Mutex<Vec<String>>,
}

fn openai_error(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error"}});
    (status, Json(body)).into_response()
}

async fn create_context(State(s): State<Arc<Shared>>, Json(body): Json<Value>) -> Response {
    if s.script.no_extensions {
        return (StatusCode::NOT_FOUND, "File Not Found").into_response();
    }
    tokio::time::sleep(s.script.context_delay).await;
    let id = body["id"].as_str().unwrap_or("ctx-1").to_string();
    let tokens = prompt_tokens(&body);
    s.contexts.lock().unwrap().insert(id.clone(), tokens);
    let pin = body["pin"].as_bool().unwrap_or(true);
    s.events
        .lock()
        .unwrap()
        .push(format!("POST {id} pin={pin}"));
    Json(json!({"id": id, "object": "context", "tokens": tokens, "pinned": pin, "created": 0}))
        .into_response()
}

async fn delete_context(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    if s.script.no_extensions {
        return (StatusCode::NOT_FOUND, "File Not Found").into_response();
    }
    s.events.lock().unwrap().push(format!("DELETE {id}"));
    match s.contexts.lock().unwrap().remove(&id) {
        Some(_) => {
            Json(json!({"id": id, "object": "context.deleted", "deleted": true})).into_response()
        }
        None => openai_error(StatusCode::NOT_FOUND, &format!("no context {id}")),
    }
}

/// Prompt tokens as a fake tokenizer counts them: one per word, 4 per message, 3 fixed.
fn prompt_tokens(body: &Value) -> u64 {
    if let Some(ids) = body["prompt"].as_array() {
        return ids.len() as u64;
    }
    if let Some(t) = body["prompt"].as_str() {
        return t.split_whitespace().count() as u64;
    }
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    3 + msgs
        .iter()
        .map(|m| {
            4 + m["content"]
                .as_str()
                .unwrap_or("")
                .split_whitespace()
                .count() as u64
        })
        .sum::<u64>()
}

fn chunk(chat: bool, text: &str, finish: Option<&str>) -> String {
    let choice = if chat {
        json!({"index": 0, "delta": {"content": text}, "finish_reason": finish})
    } else {
        json!({"index": 0, "text": text, "finish_reason": finish})
    };
    format!(
        "data: {}\n\n",
        json!({"object": "chunk", "choices": [choice]})
    )
}

async fn completions(State(s): State<Arc<Shared>>, Json(body): Json<Value>) -> Response {
    let chat = body.get("messages").is_some();
    // A reply held to a schema is a JSON object, {"w":[0,1,...]}; others are " w0 w1 ...".
    let json_reply = body.get("response_format").is_some();
    let max_tokens = body["max_tokens"].as_u64().unwrap_or(16);
    let mut prompt = prompt_tokens(&body);
    let sc = s.script.clone();
    let mut context_tokens = None;
    if let Some(id) = body["inferd"]["context"].as_str() {
        match s.contexts.lock().unwrap().get(id) {
            Some(&t) if !sc.forget_contexts => context_tokens = Some(t),
            _ => return openai_error(StatusCode::NOT_FOUND, &format!("no context {id}")),
        }
        prompt += context_tokens.unwrap_or(0);
    }
    let mut cached = None;
    let (ttft, gap) = if max_tokens > 1 {
        let n = s.generations.fetch_add(1, Ordering::SeqCst) + 1;
        cached = sc.cached.get(n - 1).copied().or(context_tokens);
        s.bodies.lock().unwrap().push(body.clone());
        s.events.lock().unwrap().push("gen".into());
        if sc.fail_nth == Some(n) {
            return (StatusCode::INTERNAL_SERVER_ERROR, "scripted failure").into_response();
        }
        if let Some(sys) = body["messages"][0]["content"].as_str() {
            s.systems.lock().unwrap().push(sys.to_string());
        }
        (sc.ttft, sc.gap)
    } else {
        (Duration::ZERO, Duration::ZERO) // calibration probes answer at once
    };
    let start = Instant::now();
    let first_at = if sc.long_threshold.is_some_and(|t| prompt >= t) {
        let until = start + sc.prefill;
        *s.blocked_until.lock().unwrap() = Some(until);
        until
    } else {
        start + ttft
    };
    // One event per step: tokens 0..max_tokens, then usage, then [DONE].
    // One event per step: tokens 0..max_tokens, then usage, then [DONE]. A token is due
    // `gap` after the previous one, but not while a long prefill blocks the server.
    let stream = futures_util::stream::unfold((0u64, first_at), move |(i, due)| {
        let s = s.clone();
        async move {
            if i < max_tokens {
                let mut at = due;
                let blocked = *s.blocked_until.lock().unwrap();
                if let Some(b) = blocked {
                    if at < b && Instant::now() < b {
                        at = b;
                    }
                }
                tokio::time::sleep_until(at).await;
                let finish = (i + 1 == max_tokens).then_some("length");
                let text = match (json_reply, i) {
                    (false, _) => format!(" w{i}"),
                    (true, 0) => "{\"w\":[0".to_string(),
                    (true, _) => format!(",{i}"),
                };
                let close = if json_reply && finish.is_some() {
                    "]}"
                } else {
                    ""
                };
                let data = chunk(chat, &format!("{text}{close}"), finish);
                Some((Ok::<_, std::io::Error>(data), (i + 1, at + gap)))
            } else if i == max_tokens {
                let mut usage = json!({"choices": [], "usage": {
                    "prompt_tokens": prompt, "completion_tokens": max_tokens,
                    "total_tokens": prompt + max_tokens}});
                if let Some(c) = cached {
                    usage["usage"]["prompt_tokens_details"] = json!({"cached_tokens": c});
                }
                Some((Ok(format!("data: {usage}\n\n")), (i + 1, due)))
            } else if i == max_tokens + 1 && !sc.no_done {
                Some((Ok("data: [DONE]\n\n".to_string()), (i + 1, due)))
            } else {
                None
            }
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

pub async fn start(script: Script) -> (String, Arc<Shared>) {
    let shared = Arc::new(Shared {
        script,
        ..Default::default()
    });
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route(
            "/v1/models",
            get(|| async { Json(json!({"data": [{"id": "fake-model"}]})) }),
        )
        .route("/v1/chat/completions", post(completions))
        .route("/v1/completions", post(completions))
        .route("/v1/contexts", post(create_context))
        .route("/v1/contexts/{id}", delete(delete_context))
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // As inferd's own listener: no Nagle + delayed-ACK stall (~40 ms) on a lone chunk.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), shared)
}

pub async fn client(url: &str) -> Client {
    let mut c = Client::new(ClientConfig::new(url)).unwrap();
    assert!(c.wait_healthy(Duration::from_secs(5)).await);
    c.resolve_model().await.unwrap();
    c
}

pub fn fleet_summary(r: &BenchReport) -> &inferd_bench::FleetSummary {
    match &r.workload {
        Workload::Fleet { summary, .. } => summary,
        _ => panic!("not a fleet report"),
    }
}

pub fn within(x: f64, want: f64, tol: f64, what: &str) {
    assert!(
        (x - want).abs() <= tol,
        "{what}: measured {x:.2}, scripted {want:.2} (tolerance {tol})"
    );
}
