//! The Responses API over HTTP: whole and streamed responses on SmolLM2 (output items,
//! usage, status, the event sequence with sequence numbers), stored responses (GET,
//! input_items, DELETE, previous_response_id reusing the chain's KV, an unknown id a 404,
//! /v1/cache), strict `text.format` held by the grammar, and on Qwen2.5-Coder a
//! function-call loop with `function_call_output`.

use serde_json::{json, Value};

use crate::common::*;

fn text_of(r: &Value) -> String {
    r["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().unwrap().iter())
        .map(|p| p["text"].as_str().unwrap().to_string())
        .collect()
}

fn ask(input: Value, max: u64) -> Value {
    json!({"model": MODEL, "input": input, "max_output_tokens": max, "temperature": 0,
           "instructions": "You are a helpful assistant who answers at length."})
}

#[test]
fn a_whole_response_is_stored_and_continued() {
    let Some(s) = server() else { return };
    let r = post(
        s.addr,
        "/v1/responses",
        &ask(json!("Tell me about the sea."), 8),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = r.json();
    let id = r["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("resp_"), "{r}");
    assert_eq!(r["object"], "response");
    assert_eq!(r["status"], "incomplete", "{r}");
    assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(r["output"][0]["type"], "message");
    // the message the token limit cut off is itself incomplete
    assert_eq!(r["output"][0]["status"], "incomplete", "{r}");
    assert_eq!(r["output"][0]["content"][0]["type"], "output_text");
    assert!(!text_of(&r).is_empty());
    assert_eq!(r["usage"]["output_tokens"], 8);
    assert!(r["usage"]["input_tokens_details"]["cached_tokens"].is_u64());
    // stored
    let got = get(s.addr, &format!("/v1/responses/{id}")).json();
    assert_eq!(got, r);
    let items = get(s.addr, &format!("/v1/responses/{id}/input_items")).json();
    assert_eq!(items["object"], "list");
    assert_eq!(
        items["data"][0]["content"][0]["text"],
        "Tell me about the sea."
    );
    assert!(
        get(s.addr, "/v1/cache").json()["responses"]["stored"]
            .as_u64()
            .unwrap()
            >= 1
    );
    // continued: the whole previous turn comes from the chain's session
    let prompt1 = r["usage"]["input_tokens"].as_u64().unwrap();
    let mut next = ask(json!("And about rivers?"), 4);
    next["previous_response_id"] = json!(id);
    let r2 = post(s.addr, "/v1/responses", &next).json();
    assert_eq!(r2["previous_response_id"], json!(id), "{r2}");
    let cached = r2["usage"]["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached >= prompt1 / 16 * 16,
        "the continuation reuses the first turn: {cached} cached of {}, first prompt {prompt1}",
        r2["usage"]["input_tokens"]
    );
    assert!(r2["usage"]["input_tokens"].as_u64().unwrap() > prompt1 + 8);
    // deleted: gone, and a continuation of it is a 404
    let d = request(s.addr, "DELETE", &format!("/v1/responses/{id}"), &[], b"");
    assert_eq!(d.json()["deleted"], true);
    get(s.addr, &format!("/v1/responses/{id}")).error(404);
    let e = post(s.addr, "/v1/responses", &next).error(404);
    assert_eq!(e["param"], "previous_response_id");
    assert_eq!(e["code"], "previous_response_not_found");
}

#[test]
fn store_false_keeps_nothing() {
    let Some(s) = server() else { return };
    let mut b = ask(
        json!([{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}]),
        2,
    );
    b["store"] = json!(false);
    let r = post(s.addr, "/v1/responses", &b).json();
    assert_eq!(r["store"], false);
    get(
        s.addr,
        &format!("/v1/responses/{}", r["id"].as_str().unwrap()),
    )
    .error(404);
}

#[test]
fn a_streamed_response_follows_the_event_sequence() {
    let Some(s) = server() else { return };
    let mut b = ask(json!("Tell me about the sea."), 6);
    b["stream"] = json!(true);
    let r = post(s.addr, "/v1/responses", &b);
    assert_eq!(r.status, 200, "{}", r.text());
    let ev = r.named_events();
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        &names[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added"
        ],
        "{names:?}"
    );
    assert_eq!(
        &names[names.len() - 4..],
        [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.incomplete"
        ]
    );
    for (i, (n, v)) in ev.iter().enumerate() {
        assert_eq!(v["type"], json!(n));
        assert_eq!(v["sequence_number"], json!(i), "{v}");
    }
    let text: String = ev
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, v)| v["delta"].as_str().unwrap().to_string())
        .collect();
    let last = &ev.last().unwrap().1["response"];
    assert_eq!(text_of(last), text);
    let item_done = &ev[ev.len() - 2].1["item"];
    assert_eq!(item_done["status"], "incomplete", "{item_done}");
    assert_eq!(last["output"][0]["status"], "incomplete", "{last}");
    assert_eq!(last["output"][0]["id"], ev[2].1["item"]["id"]);
    // the whole response says the same, and the streamed one was stored
    b["stream"] = json!(false);
    assert_eq!(text_of(&post(s.addr, "/v1/responses", &b).json()), text);
    let id = last["id"].as_str().unwrap();
    assert_eq!(get(s.addr, &format!("/v1/responses/{id}")).json(), *last);
}

#[test]
fn strict_text_format_is_held_to_the_schema() {
    let Some(s) = uncapped_server() else { return };
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"], "additionalProperties": false});
    let b = json!({"input": "Give me a person as JSON.", "max_output_tokens": 100,
        "text": {"format": {"type": "json_schema", "name": "person", "strict": true, "schema": schema}}});
    let r = post(s.addr, "/v1/responses", &b).json();
    assert_eq!(r["status"], "completed", "{r}");
    let v: Value = serde_json::from_str(&text_of(&r)).unwrap();
    assert!(jsonschema::is_valid(&schema, &v), "{v}");
    assert_eq!(r["text"]["format"]["name"], "person");
    // an unusable schema names text.format
    let bad = json!({"input": "x", "text": {"format": {"type": "json_schema", "name": "p",
        "schema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}}}}});
    let e = post(s.addr, "/v1/responses", &bad).error(400);
    assert!(
        e["param"].as_str().unwrap().starts_with("text.format"),
        "{e}"
    );
}

#[test]
fn bad_requests_are_openai_errors() {
    let Some(s) = server() else { return };
    let e = post(s.addr, "/v1/responses", &json!({"model": MODEL})).error(400);
    assert_eq!(e["param"], "input");
    let e = post(
        s.addr,
        "/v1/responses",
        &json!({"input": [{"type": "input_image"}]}),
    )
    .error(400);
    assert_eq!(e["param"], "input[0].type");
    let e = post(
        s.addr,
        "/v1/responses",
        &json!({"input": "x", "previous_response_id": "resp_nope"}),
    )
    .error(404);
    assert_eq!(e["param"], "previous_response_id");
    get(s.addr, "/v1/responses/resp_nope/input_items").error(404);
    request(s.addr, "DELETE", "/v1/responses/resp_nope", &[], b"").error(404);
}

fn weather() -> Value {
    json!([{"type": "function", "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"], "additionalProperties": false}, "strict": true}])
}

#[test]
fn a_function_call_loop() {
    let Some(s) = qwen_server() else { return };
    let b = json!({"input": "What is the weather in Paris?", "tools": weather(),
        "tool_choice": "required", "temperature": 0, "max_output_tokens": 80});
    let r = post(s.addr, "/v1/responses", &b).json();
    let call = r["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap_or_else(|| panic!("no function_call: {r}"))
        .clone();
    assert_eq!(call["name"], "get_weather");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string(), "{call}");
    // streamed: the same call, arguments in deltas
    let mut sb = b.clone();
    sb["stream"] = json!(true);
    let ev = post(s.addr, "/v1/responses", &sb).named_events();
    let streamed: String = ev
        .iter()
        .filter(|(n, _)| n == "response.function_call_arguments.delta")
        .map(|(_, v)| v["delta"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(streamed, call["arguments"].as_str().unwrap());
    // the output goes back, continued from the stored response
    let next = json!({"previous_response_id": r["id"], "tools": weather(), "tool_choice": "none",
        "temperature": 0, "max_output_tokens": 40,
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "18 C, sunny"}]});
    let r2 = post(s.addr, "/v1/responses", &next).json();
    assert_eq!(r2["output"][0]["type"], "message", "{r2}");
    assert!(!text_of(&r2).trim().is_empty(), "{r2}");
    assert!(
        r2["usage"]["input_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0,
        "{r2}"
    );
}
