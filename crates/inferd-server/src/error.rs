//! The OpenAI error body (`{"error": {"message", "type", "param", "code"}}`) and the
//! HTTP status of every failure the API reports.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use inferd_engine::SubmitError;
use serde_json::json;

/// A failed request, rendered as OpenAI renders errors.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, ...
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds, sent as `Retry-After` (429, 503).
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        let p = param.into();
        self.param = (!p.is_empty()).then_some(p);
        self
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// 400: the request is malformed or a parameter is out of range.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 for one parameter.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> Self {
        Self::bad_request(message).with_param(param)
    }

    /// 409: the request lost a race with another on the same resource.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "invalid_request_error", message)
    }

    /// 422: well-formed and well-typed, but this model cannot process it.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request_error",
            message,
        )
    }

    /// 408: the body did not arrive within the body timeout.
    pub fn body_timeout(t: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!(
                "the request body did not arrive within {} s (the body timeout)",
                t.as_secs_f64()
            ),
        )
        .with_code("request_timeout")
    }

    /// 401: no or a wrong API key.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "authentication_error", message)
            .with_code("invalid_api_key")
    }

    /// 404 for an unknown path.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message).with_code("not_found")
    }

    /// 404 for a `model` that is not served here.
    pub fn model_not_found(model: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("The model `{model}` does not exist or you do not have access to it."),
        )
        .with_param("model")
        .with_code("model_not_found")
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method not allowed on this path",
        )
        .with_code("method_not_allowed")
    }

    /// 413: the body is larger than the server accepts.
    pub fn body_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("the request body is larger than the limit of {limit} bytes"),
        )
        .with_code("request_too_large")
    }

    /// 413: what the request asks to keep does not fit (e.g. a context larger than the
    /// KV budget allows).
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            message,
        )
    }

    /// 503: the engine is draining or stopped.
    pub fn unavailable(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
            .with_code("service_unavailable");
        e.retry_after = Some(5);
        e
    }

    /// 500: something failed inside the server or engine.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The error object as JSON (also used inside an SSE stream).
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }

    /// Maps an engine refusal. `param` names the field holding the prompt.
    pub fn from_submit(e: SubmitError, param: &str) -> Self {
        match e {
            SubmitError::QueueFull { retry_after_s, .. } => {
                let mut err = Self::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    e.to_string(),
                )
                .with_code("queue_full");
                err.retry_after = Some(retry_after_s.max(1));
                err
            }
            SubmitError::TooLong { tokens, limit, .. } => Self::bad_request(format!(
                "This model's maximum context length is {} tokens; the prompt has {tokens} \
                 tokens (at most {limit} leave room for one generated token).",
                limit + 1
            ))
            .with_param(param)
            .with_code("context_length_exceeded"),
            SubmitError::Invalid(m) => Self::bad_request(m).with_param(param),
            SubmitError::InvalidParam { param, message } => {
                Self::bad_request(message).with_param(param)
            }
            SubmitError::NotFound(m) => Self::not_found(m),
            SubmitError::ShuttingDown => {
                Self::unavailable("the server is shutting down").with_code("shutting_down")
            }
            SubmitError::Stopped => Self::unavailable("the engine has stopped"),
            SubmitError::DeviceLost(_) => Self::unavailable(e.to_string()).with_code("device_lost"),
            SubmitError::KvPinned { .. } => {
                Self::unavailable(e.to_string()).with_code("kv_cache_pinned")
            }
            SubmitError::QueueTimeout { .. } => {
                let mut err = Self::unavailable(e.to_string()).with_code("queue_timeout");
                err.retry_after = Some(1);
                err
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        res
    }
}

/// Route not found (the router's fallback).
pub async fn fallback_404(uri: axum::http::Uri) -> Response {
    in_shape(
        &uri,
        ApiError::not_found(format!("no route for {}", uri.path())),
    )
}

/// Method not allowed on an existing route.
pub async fn fallback_405(uri: axum::http::Uri) -> Response {
    in_shape(&uri, ApiError::method_not_allowed())
}

/// The error in the shape of the protocol the path belongs to.
fn in_shape(uri: &axum::http::Uri, e: ApiError) -> Response {
    if crate::anthropic::is_path(uri.path()) {
        crate::anthropic::error::AnthropicError(e).into_response()
    } else {
        e.into_response()
    }
}
