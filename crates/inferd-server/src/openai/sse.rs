//! Server-sent events: one `data: {json}\n\n` per chunk (with `event: NAME` where the
//! protocol names its events), ending as the protocol ends (chat: `data: [DONE]\n\n`).
//!
//! The response body owns the request's [`RequestStream`]: when the client goes away,
//! hyper drops the body, which drops the stream, which cancels the request in the engine
//! (its KV blocks are freed at the next step).

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use inferd_engine::{Delta, Event, FinishReason, RequestStream, Usage};
use serde::Serialize;

use crate::error::ApiError;

/// How a reply ended, as the stream's last event says it.
#[derive(Clone, Debug)]
pub struct End {
    pub reason: FinishReason,
    pub usage: Usage,
    /// The stop string that ended the reply, if one did.
    pub stop: Option<String>,
}

/// How one endpoint (and protocol) writes its events.
pub trait ChunkFormat: Send + 'static {
    /// Events sent before any token (chat: the assistant role).
    fn opening(&mut self) -> Vec<Bytes>;
    /// Events for one engine delta (none while text is held back, e.g. a possible
    /// tool-call marker).
    fn delta(&mut self, d: &Delta) -> Vec<Bytes>;
    /// The last events: anything held back, the one carrying the finish reason, usage
    /// where the protocol sends it, and the stream's end marker (chat: `[DONE]`).
    fn finish(&mut self, end: End) -> Vec<Bytes>;
    /// A failure after the response began, as this protocol's closing error event(s).
    fn error(&mut self, e: ApiError) -> Vec<Bytes> {
        vec![data(&e.body()), Bytes::from_static(DONE)]
    }
}

/// One SSE event with a JSON payload.
pub fn data<T: Serialize>(v: &T) -> Bytes {
    let mut out = b"data: ".to_vec();
    // Serializing plain structs of strings and numbers cannot fail.
    serde_json::to_writer(&mut out, v).unwrap_or_default();
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// One named SSE event (`event: NAME`) with a JSON payload.
pub fn event<T: Serialize>(name: &str, v: &T) -> Bytes {
    let mut out = format!("event: {name}\n").into_bytes();
    out.extend_from_slice(&data(v));
    Bytes::from(out)
}

/// The events `event` wrote, as (name, data) pairs: for tests of stream formats.
#[cfg(test)]
pub fn parse_events(bytes: &[Bytes]) -> Vec<(String, serde_json::Value)> {
    bytes
        .iter()
        .map(|b| {
            let s = String::from_utf8_lossy(b);
            let name = s.lines().find_map(|l| l.strip_prefix("event: ")).unwrap();
            let data = s.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            (name.to_string(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

/// Chat and completions end their streams with this.
pub fn done() -> Bytes {
    Bytes::from_static(DONE)
}

const DONE: &[u8] = b"data: [DONE]\n\n";

struct State<F> {
    rs: RequestStream,
    fmt: F,
    queue: VecDeque<Bytes>,
    finished: bool,
    /// The event that opened the response, not yet written.
    first: Option<Event>,
}

/// The streaming response for a submitted request. It answers once the request's first
/// event is there (its first token), so a request the engine refuses, or that fails
/// before any token, gets its HTTP error status rather than a 200 and an error event.
/// `param` names the prompt's field in such errors.
pub async fn response<F: ChunkFormat>(
    mut rs: RequestStream,
    mut fmt: F,
    param: &str,
) -> Result<Response, ApiError> {
    let first = match rs.next().await {
        Some(Event::Rejected(e)) => return Err(ApiError::from_submit(e, param)),
        Some(Event::Error(m)) => return Err(ApiError::internal(m)),
        None => {
            return Err(ApiError::internal(
                "the engine stopped before the request started",
            ))
        }
        Some(ev) => ev,
    };
    let queue = fmt.opening().into();
    let st = State {
        rs,
        fmt,
        queue,
        finished: false,
        first: Some(first),
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(b) = st.queue.pop_front() {
                return Some((Ok::<_, Infallible>(b), st));
            }
            if st.finished {
                return None;
            }
            let ev = match st.first.take() {
                Some(ev) => Some(ev),
                None => st.rs.next().await,
            };
            st.finished = !matches!(ev, Some(Event::Delta(_)));
            if matches!(ev, Some(Event::Error(_) | Event::Rejected(_)) | None) {
                metrics::counter!(crate::metrics::STREAM_ERRORS).increment(1);
            }
            match ev {
                Some(Event::Delta(d)) => {
                    let chunks = st.fmt.delta(&d);
                    st.queue.extend(chunks);
                }
                Some(Event::Done {
                    finish_reason,
                    usage,
                    stop,
                }) => {
                    let chunks = st.fmt.finish(End {
                        reason: finish_reason,
                        usage,
                        stop,
                    });
                    st.queue.extend(chunks);
                }
                Some(Event::Error(msg)) => {
                    let chunks = st.fmt.error(ApiError::internal(msg));
                    st.queue.extend(chunks);
                }
                // Only ever the first event, taken above.
                Some(Event::Rejected(e)) => {
                    let chunks = st.fmt.error(ApiError::from_submit(e, ""));
                    st.queue.extend(chunks);
                }
                None => {
                    let e = ApiError::internal("the engine stopped before the request finished");
                    let chunks = st.fmt.error(e);
                    st.queue.extend(chunks);
                }
            }
        }
    });
    let mut res = Body::from_stream(stream).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(res)
}
