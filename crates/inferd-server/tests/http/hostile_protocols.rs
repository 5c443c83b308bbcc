//! Hostile values in every field of the Responses and Messages APIs (names from the
//! adapters' own `Deserialize` impls, as in `hostile_fields.rs`): each answer is a
//! success or a 4xx in the protocol's own error shape, never a 5xx, a hang or a panic.

use std::collections::BTreeSet;

use inferd_server::anthropic::request::MessagesBody;
use inferd_server::openai::types::InferdExt;
use inferd_server::responses::request::ResponsesBody;
use serde_json::{json, Value};

use crate::common::{post, server, Resp, MODEL};
use crate::hostile_fields::{fields_of, hostile_values, with};

#[derive(Clone, Copy)]
enum Shape {
    OpenAi,
    Anthropic,
}

fn check(r: &Resp, shape: Shape, what: &str) {
    match r.status {
        200 => {
            let text = r.text();
            let ok = serde_json::from_str::<Value>(&text).is_ok()
                || text.starts_with("data: ")
                || text.starts_with("event: ");
            assert!(
                ok,
                "{what}: a 200 that is neither JSON nor SSE: {text:.200}"
            );
            assert!(
                !text.contains("\"error\":{") && !text.contains("event: error"),
                "{what}: a 200 carrying an error: {text:.300}"
            );
        }
        400 | 404 | 408 | 413 | 429 => match shape {
            Shape::OpenAi => {
                r.error(r.status);
            }
            Shape::Anthropic => {
                r.anthropic_error(r.status);
            }
        },
        s => panic!("{what}: status {s}: {:.300}", r.text()),
    }
}

fn sweep(endpoint: &str, base: &Value, paths: &BTreeSet<String>, shape: Shape) -> usize {
    let s = server().unwrap();
    let mut sent = 0;
    for path in paths {
        for v in hostile_values() {
            let body = with(base, path, &v);
            let what = format!("{endpoint} {path} = {:.60}", v.to_string());
            check(&post(s.addr, endpoint, &body), shape, &what);
            sent += 1;
        }
    }
    let r = post(s.addr, endpoint, base);
    assert_eq!(r.status, 200, "after the sweep: {}", r.text());
    sent
}

fn paths_of<T: serde::de::DeserializeOwned>(extra: &[&str]) -> BTreeSet<String> {
    let mut paths: BTreeSet<String> = fields_of::<T>().into_iter().map(String::from).collect();
    for f in fields_of::<InferdExt>() {
        paths.insert(format!("inferd.{f}"));
    }
    paths.extend(extra.iter().map(|s| s.to_string()));
    paths
}

#[test]
fn every_responses_field_survives_every_hostile_value() {
    if server().is_none() {
        return;
    }
    let paths = paths_of::<ResponsesBody>(&[
        "input.0.type",
        "input.0.role",
        "input.0.content",
        "input.0.content.0.type",
        "input.0.content.0.text",
        "input.0.call_id",
        "input.0.output",
        "input.0.arguments",
        "text.format",
        "text.format.type",
        "text.format.schema",
        "text.format.name",
        "reasoning.effort",
        "tools.0.type",
        "tools.0.name",
        "tools.0.parameters",
        "metadata.k",
    ]);
    assert!(paths.contains("previous_response_id") && paths.contains("max_output_tokens"));
    let base = json!({"model": MODEL, "input": [{"role": "user", "content": "hi"}],
        "max_output_tokens": 1});
    let sent = sweep("/v1/responses", &base, &paths, Shape::OpenAi);
    assert!(sent > 400, "{sent} requests");
    // the stored-response routes with odd ids
    let s = server().unwrap();
    for id in ["x", "resp_..%2F..%2Fetc", &"r".repeat(5000)] {
        check(
            &crate::common::get(s.addr, &format!("/v1/responses/{id}")),
            Shape::OpenAi,
            id,
        );
        let r = crate::common::get(s.addr, &format!("/v1/responses/{id}/input_items?limit=abc"));
        check(&r, Shape::OpenAi, id);
    }
}

#[test]
fn every_messages_field_survives_every_hostile_value() {
    if server().is_none() {
        return;
    }
    let paths = paths_of::<MessagesBody>(&[
        "messages.0.role",
        "messages.0.content",
        "messages.0.content.0.type",
        "messages.0.content.0.text",
        "messages.0.content.0.tool_use_id",
        "messages.0.content.0.content",
        "messages.0.content.0.is_error",
        "messages.0.content.0.input",
        "system.0.type",
        "system.0.text",
        "tools.0.name",
        "tools.0.input_schema",
        "tools.0.type",
        "tool_choice.type",
        "tool_choice.name",
        "tool_choice.disable_parallel_tool_use",
        "thinking.type",
        "metadata.user_id",
    ]);
    assert!(paths.contains("stop_sequences") && paths.contains("max_tokens"));
    let base = json!({"model": MODEL, "max_tokens": 1,
        "messages": [{"role": "user", "content": "hi"}]});
    sweep("/v1/messages", &base, &paths, Shape::Anthropic);
    sweep("/v1/messages/count_tokens", &base, &paths, Shape::Anthropic);
}
