//! Request bodies: size limit, UTF-8 and JSON parsing with OpenAI-style 400s.
//!
//! axum's own `Json` answers 415 without a JSON content type and 422 for data errors; the
//! OpenAI API answers 400 for both, so bodies are parsed here: syntax errors, invalid
//! UTF-8 and wrong types are all 400 (`param` names the offending field when known), and a
//! body over the limit is 413. The content type is not required (curl users forget it).
//! An id in the path ([`IdPath`]) that is not UTF-8 once decoded is a 400 of the same form.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::error::ApiError;
use crate::state::AppState;
use crate::tree;

/// A request body that is a JSON object, kept as its checked text (within the size limit,
/// UTF-8, an object). Handlers read the typed parts they need straight from the text
/// ([`JsonBody::read`]): fields they do not know are skipped as they are parsed, and no
/// JSON tree of the whole body is built (one takes many times its bytes: an array of
/// small numbers about 30 times).
pub struct JsonBody(Bytes);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let body = read_body(req, state).await?;
        // Whole: a generation request is on its way to the engine (`arrival.rs`).
        crate::arrival::announce(&state.engine);
        check_object(&body)?;
        Ok(JsonBody(body))
    }
}

/// The `{id}` of a route's path (a context, session, response or model id), whose
/// rejection is an OpenAI-style 400 rather than axum's plain text.
pub struct IdPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for IdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(id)) => Ok(IdPath(id)),
            Err(e) => Err(ApiError::bad_request(format!(
                "the id in the path is not valid: {}",
                e.body_text()
            ))),
        }
    }
}

impl JsonBody {
    /// Reads `T` from the body; every failure is a 400 (`param` names the offending
    /// field when known).
    pub fn read<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        parse(&self.0)
    }
}

/// The body, within the size limit and the body timeout.
async fn read_body(req: Request, state: &AppState) -> Result<Bytes, ApiError> {
    let limit = state.config.max_body_bytes;
    // Refuse early when the declared length is too large, without reading the body.
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::body_too_large(limit));
    }
    // The router's `DefaultBodyLimit` caps bodies without a declared length; the
    // whole body must arrive within the body timeout.
    let timeout = state.config.conn.body_timeout;
    let read = tokio::time::timeout(timeout, Bytes::from_request(req, state));
    let body = read.await.map_err(|_| ApiError::body_timeout(timeout))?;
    body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::body_too_large(limit)
        } else {
            ApiError::bad_request(format!(
                "failed to read the request body: {}",
                r.body_text()
            ))
        }
    })
}

/// UTF-8 text of `body`, not blank, or a 400.
fn text(body: &[u8]) -> Result<&str, ApiError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the request body is not valid UTF-8 (at byte {})",
            e.valid_up_to()
        ))
    })?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "the request body is empty; expected a JSON object",
        ));
    }
    Ok(text)
}

/// Whether `body` is a JSON object: a 400 saying what is wrong otherwise. Only its
/// first byte is looked at when it opens an object (each read checks the rest); other
/// bodies are parsed (without keeping anything) to tell malformed JSON from a value
/// that is not an object.
fn check_object(body: &[u8]) -> Result<(), ApiError> {
    let t = text(body)?.trim_start();
    if t.starts_with('{') {
        return Ok(());
    }
    if let Some(e) = json_error(t) {
        return Err(malformed(e));
    }
    Err(ApiError::bad_request(
        "the request body must be a JSON object",
    ))
}

/// Parses a JSON body into `T`; every failure is a 400 with a message saying what is
/// wrong.
pub fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let text = text(body)?;
    let mut de = serde_json::Deserializer::from_str(text);
    let e = match tree::with_budget(|| serde_path_to_error::deserialize(&mut de)) {
        Ok(value) => {
            de.end().map_err(malformed)?;
            return Ok(value);
        }
        Err(e) => e,
    };
    use serde_json::error::Category;
    if matches!(e.inner().classify(), Category::Data) {
        return Err(invalid(e));
    }
    if json_error(text).is_some() {
        return Err(malformed(e.into_inner()));
    }
    // Well-formed JSON that a typed read from text refuses as if it were not: a number
    // past a float field's range, a wrong type where a name is expected. A JSON tree
    // reads such values as the API always has (a float past f32's range is infinite,
    // and the field's check says so; a wrong type is named with its field). Only on
    // this error path, and freed at once; a body whose tree would be larger than the
    // trees a read may hold gets the typed read's error.
    let mut de = serde_json::Deserializer::from_str(text);
    let Ok(whole) = tree::with_budget(|| tree::bounded(&mut de)) else {
        return Err(invalid(e));
    };
    tree::with_budget(|| serde_path_to_error::deserialize(&whole)).map_err(invalid)
}

/// Why `text` is not one well-formed JSON value, if it is not (nothing kept).
fn json_error(text: &str) -> Option<serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    serde::de::IgnoredAny::deserialize(&mut de)
        .and_then(|_| de.end())
        .err()
}

fn malformed(e: serde_json::Error) -> ApiError {
    ApiError::bad_request(format!("malformed JSON in the request body: {e}"))
}

/// A value of the wrong type or shape, named by its path (a field given twice by the
/// field's own path).
fn invalid(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let mut param = if path == "." { String::new() } else { path };
    let msg = inner.to_string();
    if let Some(name) = msg
        .strip_prefix("duplicate field `")
        .and_then(|rest| rest.split('`').next())
    {
        param = if param.is_empty() {
            name.to_string()
        } else {
            format!("{param}.{name}")
        };
    }
    if msg.starts_with(tree::SPENT) {
        // Named by the field holding the tree, not by the value where the count ran out.
        let end = param.find(['.', '[']).unwrap_or(param.len());
        param.truncate(end);
    }
    let msg = if param.is_empty() {
        format!("invalid request body: {msg}")
    } else {
        format!("invalid value for `{param}`: {msg}")
    };
    ApiError::bad_request(msg).with_param(param)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Body {
        temperature: Option<f32>,
        effort: Option<Effort>,
        inner: Option<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Effort {
        Low,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        n: Option<u32>,
    }

    fn read(json: &str) -> Result<Body, ApiError> {
        parse(json.as_bytes())
    }

    #[test]
    fn unknown_fields_of_any_shape_are_skipped() {
        let b = read(r#"{"zz": [[[1, {"a": 1e400}]]], "temperature": 0.5, "yy": "\ud800"}"#);
        assert_eq!(b.unwrap().temperature, Some(0.5));
    }

    #[test]
    fn well_formed_values_refused_by_the_typed_read_are_read_as_a_tree_reads_them() {
        // Past f32's range: infinite, for the field's own check to refuse.
        assert_eq!(
            read(r#"{"temperature": 1e39}"#).unwrap().temperature,
            Some(f32::INFINITY)
        );
        let e = read(r#"{"effort": 1}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("effort"));
        assert!(
            e.message.contains("invalid type: integer `1`"),
            "{}",
            e.message
        );
    }

    #[test]
    fn errors_name_the_field() {
        let e = read(r#"{"inner": {"n": -1}}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("inner.n"));
        let e = read(r#"{"temperature": 1, "temperature": 2}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("temperature"));
        let e = read(r#"{"inner": {"n": 1, "n": 2}}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("inner.n"));
        for bad in [
            r#"{"temperature": 1"#,
            r#"{"zz": [1,}"#,
            r#"{"temperature": 1} x"#,
        ] {
            let e = read(bad).unwrap_err();
            assert!(
                e.message.starts_with("malformed JSON"),
                "{bad}: {}",
                e.message
            );
            assert_eq!(e.param, None);
        }
    }
}
