//! The Anthropic Messages API over HTTP: whole and streamed replies on SmolLM2 (content
//! blocks, stop reasons, usage with the cache read), count_tokens, `x-api-key`, errors in
//! Anthropic's shape, and on Qwen2.5-Coder a forced `tool_use` held to its schema and a
//! `tool_result` turn.

use serde_json::{json, Value};

use crate::common::*;

fn hello(max_tokens: u64) -> Value {
    json!({"model": MODEL, "max_tokens": max_tokens, "temperature": 0,
           "system": "You are terse.",
           "messages": [{"role": "user", "content": "Say hello to the sea, in a long sentence."}]})
}

#[test]
fn a_whole_message_has_blocks_stop_reason_and_usage() {
    let Some(s) = server() else { return };
    let r = post(s.addr, "/v1/messages", &hello(5));
    assert_eq!(r.status, 200, "{}", r.text());
    let m = r.json();
    assert_eq!(m["type"], "message");
    assert_eq!(m["role"], "assistant");
    assert!(m["id"].as_str().unwrap().starts_with("msg"));
    assert_eq!(m["content"][0]["type"], "text");
    assert!(!m["content"][0]["text"].as_str().unwrap().is_empty(), "{m}");
    assert_eq!(m["stop_reason"], "max_tokens", "{m}");
    assert_eq!(m["usage"]["output_tokens"], 5);
    // The same prompt again: its prefix comes from the cache, and input_tokens counts
    // only what was computed.
    let again = post(s.addr, "/v1/messages", &hello(5)).json();
    let u = &again["usage"];
    let cached = u["cache_read_input_tokens"].as_u64().unwrap();
    assert!(cached >= 16, "{again}");
    let first = m["usage"]["input_tokens"].as_u64().unwrap()
        + m["usage"]["cache_read_input_tokens"].as_u64().unwrap();
    assert_eq!(u["input_tokens"].as_u64().unwrap() + cached, first);
    // count_tokens renders the same prompt
    let c = post(s.addr, "/v1/messages/count_tokens", &hello(5)).json();
    assert_eq!(c["input_tokens"].as_u64().unwrap(), first, "{c}");
}

#[test]
fn stop_sequences_and_end_turn() {
    let Some(s) = uncapped_server() else { return };
    let mut b = hello(200);
    b["temperature"] = json!(0.0);
    let whole = post(s.addr, "/v1/messages", &b).json();
    let text = whole["content"][0]["text"].as_str().unwrap().to_string();
    assert_eq!(whole["stop_reason"], "end_turn", "{whole}");
    // Stop at a word of that reply: stop_sequence names it, the text ends before it.
    let word = text
        .split_whitespace()
        .nth(2)
        .expect("a reply of at least three words")
        .to_string();
    b["stop_sequences"] = json!([word]);
    let m = post(s.addr, "/v1/messages", &b).json();
    assert_eq!(m["stop_reason"], "stop_sequence", "{m}");
    assert_eq!(m["stop_sequence"], json!(word));
    assert!(text.starts_with(m["content"][0]["text"].as_str().unwrap()));
}

#[test]
fn a_streamed_message_follows_the_event_sequence() {
    let Some(s) = server() else { return };
    let mut b = hello(6);
    b["stream"] = json!(true);
    let r = post(s.addr, "/v1/messages", &b);
    assert_eq!(r.status, 200, "{}", r.text());
    let ev = r.named_events();
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        &names[..3],
        ["message_start", "ping", "content_block_start"],
        "{names:?}"
    );
    assert_eq!(
        &names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    for (n, v) in &ev {
        assert_eq!(v["type"], json!(n), "{v}");
    }
    let text: String = ev
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, v)| v["delta"]["text"].as_str().unwrap().to_string())
        .collect();
    let whole = post(s.addr, "/v1/messages", &hello(6)).json();
    assert_eq!(text, whole["content"][0]["text"].as_str().unwrap());
    let delta = &ev[ev.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens");
    assert_eq!(delta["usage"]["output_tokens"], 6);
}

#[test]
fn errors_have_anthropic_shape_and_status() {
    let Some(s) = server() else { return };
    let no_max = json!({"messages": [{"role": "user", "content": "hi"}]});
    let e = post(s.addr, "/v1/messages", &no_max).anthropic_error(400);
    assert_eq!(e["type"], "invalid_request_error");
    assert!(e["message"].as_str().unwrap().contains("max_tokens"), "{e}");
    let img = json!({"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]});
    let e = post(s.addr, "/v1/messages", &img).anthropic_error(400);
    assert!(e["message"].as_str().unwrap().contains("image"), "{e}");
    let e = post(
        s.addr,
        "/v1/messages",
        &json!({"model": "nope", "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}]}),
    )
    .anthropic_error(404);
    assert_eq!(e["type"], "not_found_error");
    let r = request(s.addr, "POST", "/v1/messages", &[], b"{not json");
    assert_eq!(r.anthropic_error(400)["type"], "invalid_request_error");
    let r = request(s.addr, "GET", "/v1/messages", &[], b"");
    r.anthropic_error(405);
    // SmolLM2 has no tool syntax: a clear 400
    let tools = json!({"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}]});
    post(s.addr, "/v1/messages", &tools).anthropic_error(400);
}

#[test]
fn x_api_key_is_accepted() {
    let Some(addr) = keyed_server() else { return };
    let body = hello(2).to_string();
    let ct = ("Content-Type", "application/json");
    let r = request(addr, "POST", "/v1/messages", &[ct], body.as_bytes());
    assert_eq!(r.anthropic_error(401)["type"], "authentication_error");
    let r = request(
        addr,
        "POST",
        "/v1/messages",
        &[ct, ("x-api-key", "wrong")],
        body.as_bytes(),
    );
    r.anthropic_error(401);
    let r = request(
        addr,
        "POST",
        "/v1/messages",
        &[ct, ("x-api-key", KEY)],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // chat takes it too
    let chat =
        json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).to_string();
    let r = request(
        addr,
        "POST",
        "/v1/chat/completions",
        &[ct, ("x-api-key", KEY)],
        chat.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

fn weather() -> Value {
    json!([{"name": "get_weather", "description": "Current weather in a city",
        "input_schema": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": false}}])
}

#[test]
fn a_forced_tool_use_and_a_tool_result_turn() {
    let Some(s) = qwen_server() else { return };
    let ask = json!([{"role": "user", "content": "What is the weather in Paris?"}]);
    let b = json!({"max_tokens": 100, "temperature": 0, "messages": ask, "tools": weather(),
        "tool_choice": {"type": "tool", "name": "get_weather"}});
    let m = post(s.addr, "/v1/messages", &b).json();
    assert_eq!(m["stop_reason"], "tool_use", "{m}");
    let call = m["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "tool_use")
        .unwrap_or_else(|| panic!("no tool_use block: {m}"))
        .clone();
    assert_eq!(call["name"], "get_weather");
    // Anthropic's spelling of a tool-use id
    assert!(call["id"].as_str().unwrap().starts_with("toolu_"), "{call}");
    let input = call["input"].as_object().unwrap();
    assert!(input["city"].is_string(), "{call}");
    assert!(
        ["celsius", "fahrenheit"].contains(&input["unit"].as_str().unwrap()),
        "{call}"
    );
    // streamed: the same call, its input as input_json_delta pieces
    let mut sb = b.clone();
    sb["stream"] = json!(true);
    let ev = post(s.addr, "/v1/messages", &sb).named_events();
    let start = ev
        .iter()
        .find(|(n, v)| n == "content_block_start" && v["content_block"]["type"] == "tool_use")
        .unwrap_or_else(|| panic!("no tool_use block start: {ev:?}"));
    assert_eq!(start.1["content_block"]["name"], "get_weather");
    let id = start.1["content_block"]["id"].as_str().unwrap();
    assert!(id.starts_with("toolu_") && id.len() == call["id"].as_str().unwrap().len());
    let json_text: String = ev
        .iter()
        .filter(|(_, v)| v["delta"]["type"] == "input_json_delta")
        .map(|(_, v)| v["delta"]["partial_json"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json_text).unwrap(),
        call["input"]
    );
    assert_eq!(ev[ev.len() - 2].1["delta"]["stop_reason"], "tool_use");
    // the tool's result, answered in text
    let turn2 = json!({"max_tokens": 60, "temperature": 0, "tools": weather(),
        "tool_choice": {"type": "none"}, "messages": [
        ask[0],
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
            "content": [{"type": "text", "text": "18 degrees and sunny"}]}]}]});
    let m2 = post(s.addr, "/v1/messages", &turn2).json();
    let text = m2["content"][0]["text"].as_str().unwrap_or("");
    assert!(!text.is_empty(), "{m2}");
    assert!(
        text.contains("18"),
        "the answer uses the tool's result: {m2}"
    );
    // any: a call of one of the tools
    // (greedy: a random draw may run the arguments past max_tokens)
    let any = json!({"max_tokens": 100, "temperature": 0, "messages": ask, "tools": weather(),
        "tool_choice": {"type": "any"}});
    assert_eq!(
        post(s.addr, "/v1/messages", &any).json()["stop_reason"],
        "tool_use"
    );
}

/// A final assistant message is a prefill: the reply continues it (the same prompt and
/// greedy reply as chat's `continue_final_message`). One ending in whitespace, or an
/// empty message before the last, is a 400.
#[test]
fn a_final_assistant_message_is_a_prefill() {
    let Some(s) = server() else { return };
    let mut b = hello(6);
    b["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "assistant", "content": [{"type": "text", "text": "Hello, sea"}]}));
    let m = post(s.addr, "/v1/messages", &b).json();
    let text = m["content"][0]["text"]
        .as_str()
        .expect("a text block")
        .to_string();
    let u = &m["usage"];
    let prompt =
        u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap();
    let counted = post(s.addr, "/v1/messages/count_tokens", &b).json();
    assert_eq!(counted["input_tokens"].as_u64(), Some(prompt));
    let chat = json!({"model": MODEL, "max_tokens": 6, "temperature": 0,
        "continue_final_message": true, "return_token_ids": true,
        "messages": [{"role": "system", "content": "You are terse."},
                     b["messages"][0].clone(),
                     {"role": "assistant", "content": "Hello, sea"}]});
    let c = post(s.addr, "/v1/chat/completions", &chat).json();
    assert_eq!(
        c["choices"][0]["message"]["content"].as_str(),
        Some(text.as_str()),
        "{c}"
    );
    let ids: Vec<u32> =
        serde_json::from_value(c["choices"][0]["prompt_token_ids"].clone()).unwrap();
    assert_eq!(ids.len() as u64, prompt);
    assert!(s
        .tokenizer
        .decode(&ids, false)
        .unwrap()
        .ends_with("assistant\nHello, sea"));
    // Anthropic's rules for a prefill and empty messages
    let mut ws = b.clone();
    ws["messages"][1]["content"] = json!("Hello ");
    let e = post(s.addr, "/v1/messages", &ws).anthropic_error(400);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("trailing whitespace"),
        "{e}"
    );
    let mut empty = b.clone();
    empty["messages"][0]["content"] = json!([]);
    let e = post(s.addr, "/v1/messages", &empty).anthropic_error(400);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("messages[0].content"),
        "{e}"
    );
}

/// A streamed message states its usage in `message_start` as the end does: the prompt
/// split into computed and cache-read tokens.
#[test]
fn a_streamed_message_starts_with_the_cache_split() {
    let Some(s) = server() else { return };
    let mut b = hello(3);
    b["system"] = json!("You are terse and kind.");
    post(s.addr, "/v1/messages", &b); // the prompt's blocks in the cache
    b["stream"] = json!(true);
    let ev = post(s.addr, "/v1/messages", &b).named_events();
    let start = &ev[0].1["message"]["usage"];
    let end = &ev[ev.len() - 2].1["usage"];
    assert!(
        start["cache_read_input_tokens"].as_u64().unwrap() >= 16,
        "{start}"
    );
    for k in ["input_tokens", "cache_read_input_tokens"] {
        assert_eq!(start[k], end[k], "{k}: {start} vs {end}");
    }
}

/// `output_config.format` holds the reply to its schema (as chat's `response_format`).
#[test]
fn output_config_format_holds_the_reply_to_its_schema() {
    let Some(s) = server() else { return };
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
        "required": ["n"], "additionalProperties": false});
    let mut b = hello(40);
    b["output_config"] =
        json!({"format": {"type": "json_schema", "schema": schema}, "effort": "low"});
    let m = post(s.addr, "/v1/messages", &b).json();
    let text = m["content"][0]["text"].as_str().expect("a text block");
    let v: Value = serde_json::from_str(text).expect("the reply is JSON");
    assert!(v["n"].is_i64(), "{v}");
    b["output_config"] = json!({"format": {"type": "text"}});
    let e = post(s.addr, "/v1/messages", &b).anthropic_error(400);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("output_config.format.type"),
        "{e}"
    );
}
