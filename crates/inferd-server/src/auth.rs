//! `Authorization: Bearer KEY` on the `/v1` routes when an API key is configured.

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

pub async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = state.config.api_key.as_deref() else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
    match given {
        None => ApiError::unauthorized(
            "You didn't provide an API key. Send it as `Authorization: Bearer KEY`.",
        )
        .into_response(),
        Some(g) if constant_time_eq(g.as_bytes(), key.as_bytes()) => next.run(req).await,
        Some(_) => ApiError::unauthorized("Incorrect API key provided.").into_response(),
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
