//! `GET /metrics`: the Prometheus text format. The engine records counters and
//! histograms through the `metrics` facade; this module installs the recorder (once per
//! process) and sets the gauges from the engine's stats when scraped.

use std::sync::OnceLock;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use inferd_engine::metric_names as names;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::state::AppState;

/// HTTP responses by route (its pattern) and status.
pub const HTTP_RESPONSES: &str = "inferd_http_responses_total";
/// Streams that began with 200 and ended in an error event.
pub const STREAM_ERRORS: &str = "inferd_stream_errors_total";

/// Latency buckets in seconds (TTFT and inter-token latency).
const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Tokens per engine step.
const STEP_BUCKETS: &[f64] = &[1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0];

/// Installs the Prometheus recorder the first time; later calls return the same handle.
/// `None` when another recorder was installed first (metrics are then not rendered).
pub fn install() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(names::TTFT.into()), LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(names::ITL.into()), LATENCY_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(names::STEP_TOKENS.into()), STEP_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(names::SPILL_READ_SECONDS.into()),
                        LATENCY_BUCKETS,
                    )
                })
                .ok()?;
            let handle = builder.install_recorder().ok()?;
            describe();
            Some(handle)
        })
        .as_ref()
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_gauge!(names::WAITING, "Requests waiting for admission");
    describe_gauge!(names::RUNNING, "Requests being generated");
    describe_gauge!(names::KV_BLOCKS_USED, "KV cache blocks in use");
    describe_gauge!(names::KV_BLOCKS_FREE, "KV cache blocks free");
    describe_counter!(names::PROMPT_TOKENS, "Prompt tokens received");
    describe_counter!(
        names::GENERATED_TOKENS,
        "Tokens generated (also those drawn past a stop string in the step that found it, \
         which no reply shows or counts)"
    );
    describe_counter!(
        names::CACHED_TOKENS,
        "Prompt tokens found in the prefix cache when the prompt was first read"
    );
    describe_counter!(names::PREEMPTIONS, "Sequences preempted for KV memory");
    describe_counter!(names::REQUESTS_FINISHED, "Requests that finished");
    describe_counter!(
        names::REQUESTS_CANCELLED,
        "Requests whose client left before their reply ended"
    );
    describe_counter!(names::DRAFT_TOKENS, "Draft tokens the model checked");
    describe_counter!(
        names::ACCEPTED_DRAFT_TOKENS,
        "Draft tokens the model drew too"
    );
    describe_counter!(
        names::MODEL_DRAFT_TOKENS,
        "Draft tokens a draft model guessed"
    );
    describe_counter!(
        names::MODEL_ACCEPTED_DRAFT_TOKENS,
        "Draft tokens a draft model guessed that the model drew too"
    );
    describe_histogram!(names::TTFT, Unit::Seconds, "Time to first token");
    describe_histogram!(names::ITL, Unit::Seconds, "Time between tokens");
    describe_histogram!(names::STEP_TOKENS, "Tokens per engine step");
    describe_gauge!(
        names::BACKEND_EVENTS,
        "The backend's own event counts since start (CUDA: decode passes eager, captured, replayed)"
    );
    describe_counter!(
        names::SPILL_WRITE_ERRORS,
        "Writes to the SSD tier that failed (what they would have kept is recomputed)"
    );
    describe_counter!(
        names::RESPONSE_WRITE_ERRORS,
        "Stored responses whose file could not be written (kept in memory until stop)"
    );
    describe_histogram!(
        names::SPILL_READ_SECONDS,
        Unit::Seconds,
        "Time a request waited for its KV to be read back from the SSD tier"
    );
    describe_histogram!(
        names::MASKS,
        Unit::Seconds,
        "Wall time of a step's grammar masks, on all mask threads"
    );
    describe_histogram!(
        names::MASK_WAIT,
        Unit::Seconds,
        "Time a step waited after its forward pass for grammar masks (serial steps)"
    );
    describe_counter!(
        HTTP_RESPONSES,
        "HTTP responses by route and status (a stream counts by its first status: see \
         inferd_stream_errors_total)"
    );
    describe_counter!(
        STREAM_ERRORS,
        "Streamed replies that began with status 200 and ended in an error event"
    );
    describe_histogram!(
        names::STEP_PHASE,
        Unit::Seconds,
        "Wall time of each phase of an engine step"
    );
}

/// Route layer: carries the matched route's pattern out on the response, for [`count`].
pub async fn tag_route(path: MatchedPath, req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    res.extensions_mut().insert(path);
    res
}

/// Middleware over every request: counts the response by its route (the router's own
/// pattern, so a label never holds a client's ids; `other` where no route matched) and
/// status.
pub async fn count(req: Request, next: Next) -> Response {
    let res = next.run(req).await;
    let route = res
        .extensions()
        .get::<MatchedPath>()
        .map_or("other", MatchedPath::as_str)
        .to_string();
    let status = res.status().as_u16().to_string();
    metrics::counter!(HTTP_RESPONSES, "route" => route, "status" => status).increment(1);
    res
}

pub async fn render(State(state): State<AppState>) -> Response {
    let s = state.engine.stats();
    metrics::gauge!(names::WAITING).set(s.waiting as f64);
    metrics::gauge!(names::RUNNING).set(s.running as f64);
    metrics::gauge!(names::KV_BLOCKS_USED).set(s.kv_blocks_used() as f64);
    metrics::gauge!(names::KV_BLOCKS_FREE).set(s.kv_blocks_free as f64);
    // Counters the engine may not have touched yet still appear (at 0).
    metrics::counter!(names::PROMPT_TOKENS).increment(0);
    metrics::counter!(names::GENERATED_TOKENS).increment(0);
    metrics::counter!(names::CACHED_TOKENS).increment(0);
    metrics::counter!(names::PREEMPTIONS).increment(0);
    metrics::counter!(names::REQUESTS_FINISHED).increment(0);
    metrics::counter!(names::REQUESTS_CANCELLED).increment(0);
    metrics::counter!(names::SPILL_WRITE_ERRORS).increment(0);
    metrics::counter!(names::RESPONSE_WRITE_ERRORS).increment(0);
    metrics::counter!(STREAM_ERRORS).increment(0);
    let body = install().map(|h| h.render()).unwrap_or_default();
    let mut res = body.into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    res
}
