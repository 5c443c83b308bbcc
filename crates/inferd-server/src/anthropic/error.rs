//! Errors in the Messages API's shape: `{"type": "error", "error": {"type", "message"}}`,
//! with the error types Anthropic's clients map statuses to.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::error::ApiError;

/// An [`ApiError`] answered the Anthropic way.
#[derive(Debug)]
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        AnthropicError(e)
    }
}

/// The status Anthropic answers with: a request the model cannot process (OpenAI-style
/// 422) is an `invalid_request_error` 400 there.
fn status(e: &ApiError) -> StatusCode {
    if e.status == StatusCode::UNPROCESSABLE_ENTITY {
        StatusCode::BAD_REQUEST
    } else {
        e.status
    }
}

/// Anthropic's error type for a status.
pub fn kind(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// The error body (also the payload of a stream's `error` event).
pub fn body(e: &ApiError) -> Value {
    let message = match &e.param {
        Some(p) if !e.message.contains(p.as_str()) => format!("{p}: {}", e.message),
        _ => e.message.clone(),
    };
    json!({"type": "error", "error": {"type": kind(status(e)), "message": message}})
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let e = self.0;
        let mut res = (status(&e), axum::Json(body(&e))).into_response();
        if let Some(s) = e.retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_anthropic_types() {
        let b = body(&ApiError::invalid_param(
            "max_tokens",
            "max_tokens is required",
        ));
        assert_eq!(b["type"], "error");
        assert_eq!(b["error"]["type"], "invalid_request_error");
        assert_eq!(kind(StatusCode::NOT_FOUND), "not_found_error");
        assert_eq!(kind(StatusCode::SERVICE_UNAVAILABLE), "overloaded_error");
        let e = AnthropicError(ApiError::unprocessable("no")).into_response();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    }
}
