//! Structured output: `response_format` (and forced tool calls) as a grammar the reply
//! is held to. Every problem with a format is a 400 naming the parameter: a bad
//! `response_format`, or the tool whose `parameters` schema cannot be compiled.

use inferd_grammar::{AnswerFormat, CallFormat, Constraint, GrammarError, Grammars, ReplyFormat};
use serde_json::Value;

use crate::error::ApiError;
use crate::state::AppState;

/// Reads `response_format`: `None` for absent, `null` or `{"type": "text"}`.
pub fn answer_format(v: Option<&Value>) -> Result<Option<AnswerFormat>, ApiError> {
    let bad = |param: &str, msg: &str| Err(ApiError::invalid_param(param, msg));
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let Some(obj) = v.as_object() else {
        return bad(
            "response_format",
            "`response_format` must be an object with a `type`",
        );
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(AnswerFormat::JsonObject)),
        Some("json_schema") => {
            let Some(js) = obj.get("json_schema").and_then(Value::as_object) else {
                return bad(
                    "response_format.json_schema",
                    "`response_format.json_schema` must be an object with a `schema`",
                );
            };
            if let Some(name) = js.get("name") {
                if !name.as_str().is_some_and(inferd_tools::valid_name) {
                    return bad(
                        "response_format.json_schema.name",
                        "`response_format.json_schema.name` must match ^[a-zA-Z0-9_-]{1,64}$",
                    );
                }
            }
            if js.get("strict").is_some_and(|s| !s.is_boolean() && !s.is_null()) {
                return bad(
                    "response_format.json_schema.strict",
                    "`response_format.json_schema.strict` must be a boolean",
                );
            }
            // Strict or not, the schema is enforced (a grammar costs nothing to follow);
            // `strict` decides whether a keyword that cannot be enforced is an error.
            let strict = js.get("strict").and_then(Value::as_bool).unwrap_or(false);
            match js.get("schema") {
                None | Some(Value::Null) => Ok(Some(AnswerFormat::JsonSchema {
                    schema: Value::Bool(true),
                    strict,
                })),
                Some(s @ (Value::Object(_) | Value::Bool(true))) => {
                    Ok(Some(AnswerFormat::JsonSchema {
                        schema: s.clone(),
                        strict,
                    }))
                }
                Some(_) => bad(
                    "response_format.json_schema.schema",
                    "`response_format.json_schema.schema` must be a JSON Schema object",
                ),
            }
        }
        Some(other) => bad(
            "response_format.type",
            &format!(
                "`response_format.type` must be `text`, `json_object` or `json_schema`, not `{other}`"
            ),
        ),
        None => bad(
            "response_format.type",
            "`response_format.type` must be a string",
        ),
    }
}

/// Compiles what the reply is held to; `None` when it is free. `names` are the
/// request's tool names in order, so an error names the tool by its place in `tools`.
pub fn constraint(
    state: &AppState,
    answer: Option<AnswerFormat>,
    calls: Option<CallFormat>,
    names: &[String],
) -> Result<Option<Constraint>, ApiError> {
    if answer.is_none() && calls.is_none() {
        return Ok(None);
    }
    let grammars = match (&state.engine.grammars, &answer) {
        (Ok(g), _) => g,
        // A forced call on a model that cannot be constrained still starts inside the
        // call (the prompt opens it); only its arguments go unchecked.
        (Err(_), None) => return Ok(None),
        (Err(e), Some(_)) => return Err(ApiError::invalid_param("response_format", e.to_string())),
    };
    let format = ReplyFormat {
        answer: answer.clone(),
        calls: calls.clone(),
    };
    match grammars.compile(&format) {
        Ok(c) => Ok(Some(c)),
        Err(e) => Err(locate(grammars, answer, calls, names, e)),
    }
}

/// Names the part of the request whose schema failed: `response_format`, or the first
/// tool that fails on its own.
fn locate(
    grammars: &Grammars,
    answer: Option<AnswerFormat>,
    calls: Option<CallFormat>,
    names: &[String],
    e: GrammarError,
) -> ApiError {
    if let Some(a) = answer {
        let alone = ReplyFormat {
            answer: Some(a),
            calls: None,
        };
        if let Err(e) = grammars.compile(&alone) {
            return schema_error("response_format.json_schema.schema", e);
        }
    }
    if let Some(c) = calls {
        for tool in &c.tools {
            let alone = ReplyFormat {
                answer: None,
                calls: Some(CallFormat {
                    tools: vec![tool.clone()],
                    ..c.clone()
                }),
            };
            if let Err(e) = grammars.compile(&alone) {
                let i = names.iter().position(|n| *n == tool.name).unwrap_or(0);
                return schema_error(&format!("tools[{i}].function.parameters"), e);
            }
        }
        return schema_error("tools", e);
    }
    schema_error("response_format", e)
}

fn schema_error(param: &str, e: GrammarError) -> ApiError {
    ApiError::invalid_param(
        param,
        format!("`{param}` is not a JSON Schema inferd can enforce: {e}"),
    )
    .with_code("invalid_schema")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn param_of(v: Value) -> String {
        answer_format(Some(&v))
            .unwrap_err()
            .param
            .unwrap_or_default()
    }

    #[test]
    fn response_format_kinds() {
        assert_eq!(answer_format(None).unwrap(), None);
        assert_eq!(answer_format(Some(&json!({"type": "text"}))).unwrap(), None);
        assert_eq!(
            answer_format(Some(&json!({"type": "json_object"}))).unwrap(),
            Some(AnswerFormat::JsonObject)
        );
        let s = json!({"type": "integer"});
        assert_eq!(
            answer_format(Some(&json!({"type": "json_schema",
                "json_schema": {"name": "n", "strict": true, "schema": s}})))
            .unwrap(),
            Some(AnswerFormat::JsonSchema {
                schema: s,
                strict: true
            })
        );
    }

    #[test]
    fn bad_response_formats_name_the_field() {
        assert_eq!(param_of(json!("json")), "response_format");
        assert_eq!(param_of(json!({"type": "xml"})), "response_format.type");
        assert_eq!(
            param_of(json!({"type": "json_schema"})),
            "response_format.json_schema"
        );
        assert_eq!(
            param_of(json!({"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}})),
            "response_format.json_schema.name"
        );
        assert_eq!(
            param_of(json!({"type": "json_schema", "json_schema": {"schema": [1]}})),
            "response_format.json_schema.schema"
        );
    }
}
