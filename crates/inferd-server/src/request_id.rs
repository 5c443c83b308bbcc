//! Every response carries a request id, the same value under OpenAI's header
//! (`x-request-id`) and Anthropic's (`request-id`); the SDKs show it as `_request_id`
//! for logs and reports. A client's own `x-request-id` (visible ASCII, at most 128
//! bytes) is echoed, so a caller can follow its request; otherwise one is made.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

use crate::openai::oid;

const OPENAI: HeaderName = HeaderName::from_static("x-request-id");
const ANTHROPIC: HeaderName = HeaderName::from_static("request-id");
/// The longest client id echoed.
const MAX_LEN: usize = 128;

/// The client's id where it is one to echo.
fn given(req: &Request) -> Option<HeaderValue> {
    let v = req.headers().get(&OPENAI)?;
    let ok = !v.is_empty() && v.len() <= MAX_LEN && v.as_bytes().iter().all(u8::is_ascii_graphic);
    ok.then(|| v.clone())
}

/// Middleware over every route: stamps the response with the request's id.
pub async fn stamp(req: Request, next: Next) -> Response {
    let id = given(&req)
        .unwrap_or_else(|| HeaderValue::from_str(&oid("req")).expect("a made id is ASCII"));
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(OPENAI, id.clone());
    h.insert(ANTHROPIC, id);
    res
}
