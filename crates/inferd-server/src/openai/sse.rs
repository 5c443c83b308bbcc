//! Server-sent events: one `data: {json}\n\n` per chunk, then `data: [DONE]\n\n`.
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

/// How one endpoint writes its chunks.
pub trait ChunkFormat: Send + 'static {
    /// Chunks sent before any token (chat: the assistant role).
    fn opening(&mut self) -> Vec<Bytes>;
    /// Chunks for one engine delta (none while text is held back, e.g. a possible
    /// tool-call marker).
    fn delta(&mut self, d: &Delta) -> Vec<Bytes>;
    /// The last chunks: anything held back, then the chunk carrying `finish_reason`.
    fn finish(&mut self, reason: FinishReason) -> Vec<Bytes>;
    /// The `choices: []` chunk with usage (only with `include_usage`).
    fn usage(&mut self, u: Usage) -> Bytes;
}

/// One SSE event with a JSON payload.
pub fn data<T: Serialize>(v: &T) -> Bytes {
    let mut out = b"data: ".to_vec();
    // Serializing plain structs of strings and numbers cannot fail.
    serde_json::to_writer(&mut out, v).unwrap_or_default();
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

const DONE: &[u8] = b"data: [DONE]\n\n";

struct State<F> {
    rs: RequestStream,
    fmt: F,
    queue: VecDeque<Bytes>,
    include_usage: bool,
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
    include_usage: bool,
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
        include_usage,
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
            match ev {
                Some(Event::Delta(d)) => {
                    let chunks = st.fmt.delta(&d);
                    st.queue.extend(chunks);
                }
                Some(Event::Done {
                    finish_reason,
                    usage,
                }) => {
                    let chunks = st.fmt.finish(finish_reason);
                    st.queue.extend(chunks);
                    if st.include_usage {
                        let b = st.fmt.usage(usage);
                        st.queue.push_back(b);
                    }
                    st.queue.push_back(Bytes::from_static(DONE));
                }
                Some(Event::Error(msg)) => {
                    st.queue.push_back(data(&ApiError::internal(msg).body()));
                    st.queue.push_back(Bytes::from_static(DONE));
                }
                // Only ever the first event, taken above.
                Some(Event::Rejected(e)) => {
                    st.queue
                        .push_back(data(&ApiError::from_submit(e, "").body()));
                    st.queue.push_back(Bytes::from_static(DONE));
                }
                None => {
                    let e = ApiError::internal("the engine stopped before the request finished");
                    st.queue.push_back(data(&e.body()));
                    st.queue.push_back(Bytes::from_static(DONE));
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
