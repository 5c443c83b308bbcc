//! Tool calls over HTTP: request checks. (Calls parsed into `tool_calls`, whole and
//! streamed, are tested in `inferd-tools` and `openai::tools`; an end-to-end forced call
//! needs constrained decoding, since SmolLM2 does not write valid arguments unaided.)

use serde_json::{json, Value};

use crate::common::*;

fn weather_tools() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }}])
}

#[test]
fn tool_requests_are_checked() {
    let Some(s) = server() else { return };
    let msgs = json!([{"role": "user", "content": "Weather in Paris?"}]);
    // SmolLM2's template has no tool-call syntax: say so
    let e = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": msgs, "tools": weather_tools()}),
    )
    .error(400);
    assert!(
        e["message"].as_str().unwrap().contains("--tool-syntax"),
        "{e}"
    );
    // tool_choice none: a plain reply
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": msgs, "tools": weather_tools(), "tool_choice": "none", "max_tokens": 3}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // malformed tools name the parameter
    let e = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": msgs, "tools": [{"type": "function", "function": {"name": "bad name"}}]}),
    )
    .error(400);
    assert_eq!(e["param"], "tools[0].function.name");
    let e = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": msgs, "tools": weather_tools(),
                "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
    )
    .error(400);
    assert!(
        e["param"].as_str().unwrap().starts_with("tool_choice"),
        "{e}"
    );
    // a tool message without its call id
    let e = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "18C"}]}),
    )
    .error(400);
    assert!(e["param"].as_str().unwrap().contains("tool_call_id"), "{e}");
}
