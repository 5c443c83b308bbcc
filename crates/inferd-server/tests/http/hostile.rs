//! A hostile client: requests built to crash, stall or mislead the server get a clear
//! 4xx, and the server keeps serving everyone else.

use serde_json::{json, Value};

use crate::common::{get, post, server, MODEL};

const CHAT: &str = "/v1/chat/completions";

fn object_with(n: usize) -> Value {
    let props: serde_json::Map<String, Value> = (0..n)
        .map(|i| (format!("p{i}"), json!({"type": "string"})))
        .collect();
    json!({"type": "object", "properties": props})
}

fn alive(addr: std::net::SocketAddr) {
    assert_eq!(get(addr, "/health").status, 200, "the server went down");
}

#[test]
fn huge_schemas_are_400_and_the_server_lives() {
    let Some(s) = server() else { return };
    // 7000 optional properties (a 200 KB body) overflowed a stack and aborted the
    // process; in `response_format`, in a tool, streamed or not.
    let schema = object_with(7000);
    for stream in [false, true] {
        let r = post(
            s.addr,
            CHAT,
            &json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                "stream": stream, "max_tokens": 2,
                "response_format": {"type": "json_schema",
                    "json_schema": {"name": "big", "strict": true, "schema": schema}}}),
        );
        let e = r.error(400);
        assert_eq!(e["code"], "invalid_schema", "{e}");
        assert_eq!(e["param"], "response_format.json_schema.schema", "{e}");
        assert!(
            e["message"].as_str().unwrap().contains("1000 properties"),
            "{e}"
        );
        alive(s.addr);
    }
}

#[test]
fn unenforceable_schemas_are_400_without_internals() {
    let Some(s) = server() else { return };
    for schema in [
        json!({"$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
            "required": ["x"]}}, "$ref": "#/$defs/a"}),
        json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
            "$ref": "#/$defs/a"}),
        json!({"allOf": [{"type": "string"}, {"type": "integer"}]}),
        object_with(1500),
    ] {
        for stream in [false, true] {
            let r = post(
                s.addr,
                CHAT,
                &json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                    "stream": stream, "max_tokens": 2,
                    "response_format": {"type": "json_schema",
                        "json_schema": {"name": "x", "schema": schema}}}),
            );
            // Never 200 and then an error, never 500.
            let e = r.error(400);
            assert_eq!(e["code"], "invalid_schema", "{schema}: {e}");
            let msg = e["message"].as_str().unwrap();
            for leak in ["<state>", "<grammar>", "Parser:", "\n"] {
                assert!(!msg.contains(leak), "{schema}: {msg}");
            }
        }
    }
    alive(s.addr);
}

#[test]
fn a_huge_tool_schema_is_400_naming_the_tool() {
    let Some(s) = crate::common::qwen_server() else {
        return;
    };
    let tools = json!([
        {"type": "function", "function": {"name": "ok", "parameters": object_with(3)}},
        {"type": "function", "function": {"name": "big", "parameters": object_with(7000)}}
    ]);
    for choice in [
        json!("required"),
        json!({"type": "function", "function": {"name": "big"}}),
    ] {
        let r = post(
            s.addr,
            CHAT,
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                "tools": tools, "tool_choice": choice}),
        );
        let e = r.error(400);
        assert_eq!(e["code"], "invalid_schema", "{e}");
        assert_eq!(e["param"], "tools[1].function.parameters", "{e}");
        alive(s.addr);
    }
}

#[test]
fn a_prompt_pinned_contexts_leave_no_room_for_is_503_streamed_or_not() {
    if server().is_none() {
        return;
    }
    // A pool of 64 blocks; a pinned context takes 30 of them.
    let cfg = inferd_engine::EngineConfig {
        kv_budget: inferd_engine::KvBudget::Bytes(64 * 16 * 30 * 3 * 64 * 2 * 4),
        warmup: false,
        ..Default::default()
    };
    let (engine, tpl) = crate::common::engine(cfg);
    let addr = crate::common::serve(engine, tpl, Default::default());
    let r = post(
        addr,
        "/v1/contexts",
        &json!({"id": "brief", "prompt": "brief ".repeat(470)}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let long = "other words ".repeat(300);
    for stream in [false, true] {
        let r = post(
            addr,
            CHAT,
            &json!({"messages": [{"role": "user", "content": long}], "max_tokens": 2,
                "stream": stream}),
        );
        let e = r.error(503);
        assert_eq!(e["code"], "kv_cache_pinned", "{e}");
        assert!(e["message"].as_str().unwrap().contains("brief: "), "{e}");
    }
    alive(addr);
}
