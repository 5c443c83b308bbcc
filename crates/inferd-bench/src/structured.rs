//! Structured replies for the fleet workload (`--json-schema`, `--json-schema-prompt-only`):
//! agents asked to answer as JSON matching a schema, with or without the reply held to it.
//!
//! Both modes put the same text in the prompt: the turn-0 user message ends with
//! [`instruction`] (the schema, compact), every later user message with [`REMINDER`]. Only
//! `--json-schema` also sends
//! `"response_format": {"type": "json_schema", "json_schema": {"name": "agent_reply",
//! "strict": true, "schema": SCHEMA}}`, so a `--json-schema-prompt-only` run on the same seed
//! is the unconstrained twin of a `--json-schema` run: identical prompts, only the constraint
//! differs.
//!
//! The schema is `builtin` ([`builtin_schema`], an agent's next action) or a JSON Schema file.

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// The `--json-schema` argument naming the built-in schema.
pub const BUILTIN: &str = "builtin";

/// `response_format.json_schema.name`.
pub const SCHEMA_NAME: &str = "agent_reply";

/// The line every user message after turn 0 ends with.
pub const REMINDER: &str = "Answer as JSON matching the same schema.";

/// A realistic agent action: a short thought, one of four tools, its typed arguments and a
/// coarse confidence. Every field is required and bounded (string lengths, integer range,
/// array size, a `multipleOf` number), no other properties are allowed.
pub fn builtin_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "thought": {"type": "string", "maxLength": 200},
            "action": {
                "type": "string",
                "enum": ["search_notes", "read_file", "run_tests", "write_summary"]
            },
            "args": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "maxLength": 80},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 20},
                    "paths": {
                        "type": "array",
                        "items": {"type": "string", "maxLength": 40},
                        "maxItems": 3
                    }
                },
                "required": ["query", "limit", "paths"],
                "additionalProperties": false
            },
            "confidence": {"type": "number", "minimum": 0, "maximum": 1, "multipleOf": 0.25}
        },
        "required": ["thought", "action", "args", "confidence"],
        "additionalProperties": false
    })
}

/// The schema `spec` names: [`BUILTIN`], else the JSON file at that path (a JSON Schema
/// object, or `true`).
pub fn load_schema(spec: &str) -> Result<Value> {
    if spec == BUILTIN {
        return Ok(builtin_schema());
    }
    let text =
        std::fs::read_to_string(spec).with_context(|| format!("reading the JSON Schema {spec}"))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing the JSON Schema {spec}"))?;
    if !(v.is_object() || v == Value::Bool(true)) {
        bail!("{spec}: a JSON Schema must be an object (or true)");
    }
    Ok(v)
}

/// The sentence the turn-0 user message ends with: the schema, compact.
pub fn instruction(schema: &Value) -> String {
    format!("Answer as JSON matching this JSON Schema: {schema}")
}

/// The request's `response_format` holding the reply to `schema`.
pub fn response_format(schema: &Value) -> Value {
    json!({
        "type": "json_schema",
        "json_schema": {"name": SCHEMA_NAME, "strict": true, "schema": schema},
    })
}

/// Whether the whole reply (surrounding whitespace aside) parses as one JSON value.
pub fn is_json(text: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(text.trim()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_schema_is_a_closed_object_with_bounded_fields() {
        let s = load_schema(BUILTIN).unwrap();
        assert_eq!(s, builtin_schema());
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["required"].as_array().unwrap().len(), 4);
        let p = &s["properties"];
        assert_eq!(p["thought"]["maxLength"], 200);
        assert_eq!(p["action"]["enum"].as_array().unwrap().len(), 4);
        assert_eq!(p["args"]["additionalProperties"], false);
        assert_eq!(p["args"]["properties"]["paths"]["maxItems"], 3);
        assert_eq!(p["confidence"]["multipleOf"], 0.25);
        // Properties keep their order (thought first), in the prompt as in the grammar.
        let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["thought", "action", "args", "confidence"]);
        assert!(instruction(&s).starts_with(
            "Answer as JSON matching this JSON Schema: {\"type\":\"object\",\"properties\":{\"thought\""
        ));
    }

    #[test]
    fn schema_files_are_read_and_checked() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("inferd-bench-schema-{}.json", std::process::id()));
        std::fs::write(
            &path,
            r#"{"type": "object", "properties": {"b": {}, "a": {}}}"#,
        )
        .unwrap();
        let s = load_schema(path.to_str().unwrap()).unwrap();
        let keys: Vec<&String> = s["properties"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["b", "a"], "the file's property order is kept");
        std::fs::write(&path, "[1, 2]").unwrap();
        let e = load_schema(path.to_str().unwrap()).unwrap_err();
        assert!(e.to_string().contains("must be an object"), "{e}");
        std::fs::write(&path, "{not json").unwrap();
        let e = load_schema(path.to_str().unwrap()).unwrap_err();
        assert!(
            format!("{e:#}").contains("parsing the JSON Schema"),
            "{e:#}"
        );
        let _ = std::fs::remove_file(&path);
        let e = load_schema(path.to_str().unwrap()).unwrap_err();
        assert!(
            format!("{e:#}").contains("reading the JSON Schema"),
            "{e:#}"
        );
    }

    #[test]
    fn response_format_and_json_check() {
        let rf = response_format(&json!({"type": "object"}));
        assert_eq!(
            rf,
            json!({"type": "json_schema", "json_schema": {"name": "agent_reply", "strict": true,
                "schema": {"type": "object"}}})
        );
        assert!(is_json(" {\"a\": [1, 2]}\n"));
        assert!(is_json("3"));
        assert!(!is_json("{\"a\": 1} and more"));
        assert!(!is_json("{\"a\": "));
        assert!(!is_json(""));
    }
}
