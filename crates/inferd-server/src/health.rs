//! `GET /health`: liveness plus the figures `inferd status` shows. 200 while serving,
//! 503 when the engine is draining, stopped, or failed (the device is lost; `error` says
//! why): the same body, another `status`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::state::AppState;

pub async fn health(State(state): State<AppState>) -> Response {
    let e = &state.engine;
    let failure = e.failure();
    let (code, status) = if failure.is_some() {
        (StatusCode::SERVICE_UNAVAILABLE, "failed")
    } else if !e.is_running() {
        (StatusCode::SERVICE_UNAVAILABLE, "stopped")
    } else if !e.is_accepting() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else {
        (StatusCode::OK, "ok")
    };
    let s = e.stats();
    let mut body = json!({
        "status": status,
        "model": e.info.name,
        "uptime_s": s.uptime_s,
        "queue": s.waiting,
        "running": s.running,
        "kv": {
            "blocks_total": s.kv_blocks_total,
            "blocks_used": s.kv_blocks_used(),
            "blocks_free": s.kv_blocks_free,
            "block_size": s.kv_block_size,
            "bytes_per_block": s.kv_bytes_per_block,
        },
        "preemptions": s.preemptions,
        "max_context": e.info.max_context,
        "prompt_tokens_total": s.prompt_tokens_total,
        "generated_tokens_total": s.generated_tokens_total,
        "requests_finished": s.requests_finished,
        "requests_cancelled": s.requests_cancelled,
        "rss_bytes": rss_bytes(),
    });
    if let Some(why) = failure {
        body["error"] = json!(why);
    }
    if let Some(a) = state.config.address {
        body["address"] = json!(a.to_string());
    }
    (code, Json(body)).into_response()
}

/// The server's resident memory, from `/proc/self/statm` (`null` where there is none).
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * page.max(1) as u64)
}
