//! `Authorization: Bearer KEY` (or Anthropic's `x-api-key: KEY`) on the `/v1` routes
//! when an API key is configured.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// Compares in time that depends only on the lengths, not on where the bytes differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The key a request gives: `Authorization: Bearer KEY`, else `x-api-key: KEY`.
fn given_key(req: &Request) -> Option<&str> {
    let h = req.headers();
    let bearer = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
    bearer.or_else(|| {
        h.get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    })
}

pub async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = state.config.api_key.as_deref() else {
        return next.run(req).await;
    };
    let err = match given_key(&req) {
        None => ApiError::unauthorized(
            "You didn't provide an API key. Send it as `Authorization: Bearer KEY` or `x-api-key: KEY`.",
        ),
        Some(g) if constant_time_eq(g.as_bytes(), key.as_bytes()) => return next.run(req).await,
        Some(_) => ApiError::unauthorized("Incorrect API key provided."),
    };
    if crate::anthropic::is_path(req.uri().path()) {
        crate::anthropic::error::AnthropicError(err).into_response()
    } else {
        err.into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_exactly() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(constant_time_eq(b"", b""));
    }
}
