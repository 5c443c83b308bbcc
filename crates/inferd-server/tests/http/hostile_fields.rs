//! Hostile values in every field, generated from the request types: each field name
//! comes from the server's own `Deserialize` impls (so a new field is covered the day it
//! is added), and each gets every kind of wrong value. No answer may be a 5xx, a hang or
//! a malformed body, and the server must serve a normal request afterwards.

use std::collections::BTreeSet;

use inferd_server::openai::types::{ChatParams, CommonParams, CompletionParams, InferdExt};
use serde::de::{self, DeserializeOwned, Visitor};
use serde_json::{json, Value};

use crate::common::{post, server, Resp, MODEL};

/// Captures the field names a derived `Deserialize` asks for, then stops it.
struct FieldNames(Vec<&'static str>);

#[derive(Debug)]
struct Captured;

impl std::fmt::Display for Captured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("captured")
    }
}

impl std::error::Error for Captured {}

impl de::Error for Captured {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Captured
    }
}

impl<'de> de::Deserializer<'de> for &mut FieldNames {
    type Error = Captured;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Captured> {
        Err(Captured)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Captured> {
        self.0.extend_from_slice(fields);
        Err(Captured)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// The fields `T` reads from a request body.
pub fn fields_of<T: DeserializeOwned>() -> Vec<&'static str> {
    let mut names = FieldNames(Vec::new());
    let _ = T::deserialize(&mut names);
    assert!(!names.0.is_empty(), "no fields captured");
    names.0
}

/// Every kind of wrong value: types, extremes, sizes, nesting.
pub fn hostile_values() -> Vec<Value> {
    let mut deep = json!(1);
    for _ in 0..120 {
        deep = json!([deep]);
    }
    let mut deep_obj = json!({});
    for _ in 0..60 {
        deep_obj = json!({ "a": deep_obj });
    }
    vec![
        Value::Null,
        json!(true),
        json!(-1),
        json!(0),
        json!(1e308),
        json!(-1e308),
        json!(4294967297u64),
        json!(u64::MAX),
        json!(""),
        json!("\u{0}\u{ffff}☃"),
        Value::String("x".repeat(64 << 10)),
        json!([]),
        json!([1, "a", null]),
        json!({}),
        deep,
        deep_obj,
        Value::Array(vec![json!("stop"); 10_000]),
    ]
}

fn chat_base() -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
}

fn completion_base() -> Value {
    json!({"model": MODEL, "prompt": "hi", "max_tokens": 1})
}

/// An acceptable answer: a success, or a 4xx with OpenAI's error shape.
fn check(r: &Resp, what: &str) {
    match r.status {
        200 => {
            let text = r.text();
            let ok = serde_json::from_str::<Value>(&text).is_ok() || text.starts_with("data: ");
            assert!(
                ok,
                "{what}: a 200 that is neither JSON nor SSE: {text:.200}"
            );
            assert!(
                !text.contains("\"error\""),
                "{what}: a 200 carrying an error: {text:.300}"
            );
        }
        400 | 404 | 408 | 413 | 422 | 429 => {
            r.error(r.status);
        }
        s => panic!("{what}: status {s}: {:.300}", r.text()),
    }
}

/// Sets `path` (dot-separated, numbers index arrays) of `body` to `v`.
pub fn with(body: &Value, path: &str, v: &Value) -> Value {
    let mut b = body.clone();
    let mut at = &mut b;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        at = match p.parse::<usize>() {
            Ok(n) => {
                if !at.is_array() {
                    *at = json!([]);
                }
                let arr = at.as_array_mut().unwrap();
                while arr.len() <= n {
                    arr.push(json!({}));
                }
                &mut arr[n]
            }
            Err(_) => {
                if at.get(*p).is_none() && !last {
                    at[*p] = json!({});
                }
                &mut at[*p]
            }
        };
    }
    *at = v.clone();
    b
}

fn sweep(endpoint: &str, base: &Value, paths: &BTreeSet<String>) -> usize {
    let s = server().unwrap();
    let mut sent = 0;
    for path in paths {
        for v in hostile_values() {
            let body = with(base, path, &v);
            let what = format!("{endpoint} {path} = {:.60}", v.to_string());
            check(&post(s.addr, endpoint, &body), &what);
            sent += 1;
        }
    }
    // Still serving.
    let r = post(s.addr, endpoint, base);
    assert_eq!(r.status, 200, "after the sweep: {}", r.text());
    sent
}

#[test]
fn every_chat_field_survives_every_hostile_value() {
    if server().is_none() {
        return;
    }
    let mut paths: BTreeSet<String> = fields_of::<CommonParams>()
        .into_iter()
        .chain(fields_of::<ChatParams>())
        .map(String::from)
        .collect();
    for f in fields_of::<InferdExt>() {
        paths.insert(format!("inferd.{f}"));
    }
    for f in ["role", "content", "name", "tool_calls", "tool_call_id"] {
        paths.insert(format!("messages.0.{f}"));
    }
    for f in [
        "type",
        "json_schema",
        "json_schema.schema",
        "json_schema.name",
        "json_schema.strict",
    ] {
        paths.insert(format!("response_format.{f}"));
    }
    for f in [
        "type",
        "function",
        "function.name",
        "function.parameters",
        "function.strict",
    ] {
        paths.insert(format!("tools.0.{f}"));
    }
    paths.insert("stream_options.include_usage".into());
    assert!(
        paths.contains("messages") && paths.contains("top_logprobs"),
        "{paths:?}"
    );
    let sent = sweep("/v1/chat/completions", &chat_base(), &paths);
    assert!(sent > 800, "{sent} requests");
}

#[test]
fn every_completion_field_survives_every_hostile_value() {
    if server().is_none() {
        return;
    }
    let mut paths: BTreeSet<String> = fields_of::<CommonParams>()
        .into_iter()
        .chain(fields_of::<CompletionParams>())
        .map(String::from)
        .collect();
    for f in fields_of::<InferdExt>() {
        paths.insert(format!("inferd.{f}"));
    }
    assert!(
        paths.contains("prompt") && paths.contains("echo"),
        "{paths:?}"
    );
    sweep("/v1/completions", &completion_base(), &paths);
}
