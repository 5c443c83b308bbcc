//! Tool calls over HTTP: request checks on SmolLM2 (its template has no tool syntax), and
//! on Qwen2.5-Coder-0.5B (Hermes syntax) forced calls end to end: arguments valid
//! against the function's schema, streamed calls equal to whole ones, schema errors
//! naming the tool. Also `response_format` errors, `json_object` on completions, and
//! stop strings under a constraint.

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

fn agent_tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"enum": ["celsius", "fahrenheit"]}
            }, "required": ["city", "unit"], "additionalProperties": false}
        }},
        {"type": "function", "function": {
            "name": "search_files",
            "description": "Find files whose name matches a glob",
            "parameters": {"type": "object", "properties": {
                "glob": {"type": "string", "maxLength": 40},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50}
            }, "required": ["glob"], "additionalProperties": false}
        }}
    ])
}

/// Asserts that `name` is one of `tools` and `args` is JSON valid against its parameters.
fn assert_valid_call(tools: &Value, name: &str, args: &str) {
    let tool = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == name)
        .unwrap_or_else(|| panic!("unknown function {name}"));
    let parsed: Value = serde_json::from_str(args).unwrap();
    let validator = jsonschema::validator_for(&tool["function"]["parameters"]).unwrap();
    assert!(validator.is_valid(&parsed), "{name}({args})");
}

/// The calls of a streamed reply, reassembled as OpenAI clients do: by index, the id and
/// name from the first delta, arguments concatenated. Also the finish reason.
fn reassemble(r: &Resp) -> (Vec<(String, String)>, String) {
    let mut calls: Vec<(String, String)> = Vec::new();
    let mut finish = String::new();
    for e in r.events() {
        if e == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&e).unwrap();
        let choice = &v["choices"][0];
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
        for d in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = d["index"].as_u64().unwrap() as usize;
            if calls.len() <= i {
                assert!(d["id"].as_str().is_some_and(|id| !id.is_empty()), "{d}");
                calls.push((
                    d["function"]["name"].as_str().unwrap().to_string(),
                    String::new(),
                ));
            }
            calls[i]
                .1
                .push_str(d["function"]["arguments"].as_str().unwrap_or_default());
        }
    }
    (calls, finish)
}

#[test]
fn forced_calls_are_valid_and_stream_as_they_come_whole() {
    let Some(s) = qwen_server() else { return };
    let tools = agent_tools();
    let asks = [
        (
            "What is the weather in Oslo, in celsius?",
            json!("required"),
            None,
        ),
        (
            "Find the Rust files in this project.",
            json!({"type": "function", "function": {"name": "search_files"}}),
            Some("search_files"),
        ),
    ];
    for (question, choice, want) in asks {
        let body = json!({
            "messages": [{"role": "user", "content": question}],
            "tools": tools, "tool_choice": choice, "temperature": 0, "max_tokens": 120,
            "logprobs": true, "return_token_ids": true,
        });
        let whole = post(s.addr, "/v1/chat/completions", &body);
        assert_eq!(whole.status, 200, "{}", whole.text());
        let v = whole.json();
        let choice0 = &v["choices"][0];
        assert_eq!(choice0["finish_reason"], "tool_calls", "{v}");
        assert!(choice0["message"]["content"].is_null(), "{v}");
        let calls = choice0["message"]["tool_calls"].as_array().unwrap().clone();
        assert!(!calls.is_empty());
        let mut expected = Vec::new();
        for c in &calls {
            let name = c["function"]["name"].as_str().unwrap();
            if let Some(w) = want {
                assert_eq!(name, w);
            }
            let args = c["function"]["arguments"].as_str().unwrap();
            assert_valid_call(&tools, name, args);
            expected.push((name.to_string(), args.to_string()));
        }
        let mut sbody = body.clone();
        sbody["stream"] = json!(true);
        let streamed = post(s.addr, "/v1/chat/completions", &sbody);
        assert_eq!(streamed.status, 200);
        let (calls, finish) = reassemble(&streamed);
        assert_eq!(calls, expected);
        assert_eq!(finish, "tool_calls");
        // The tokens the tool parser held to the end (the call's closing tag) carry
        // their logprobs too: the stream has the whole reply's, one per token id.
        let chunks = chunks(&streamed.events());
        let logprobs = joined(&chunks, &["logprobs", "content"]);
        assert_eq!(Value::from(logprobs), choice0["logprobs"]["content"]);
        let ids = streamed_token_ids(&chunks);
        assert_eq!(json!(ids), choice0["token_ids"]);
        assert_eq!(
            ids.len(),
            choice0["logprobs"]["content"].as_array().unwrap().len()
        );
    }
}

/// A call the reply's end cuts short (`max_tokens`, a stop string inside its arguments)
/// reads the same streamed or whole: the call with the arguments written so far, no
/// content (the stream used to repeat the call's text as content, and the whole reply
/// showed that text alone), and the end's own reason, not `tool_calls`. Anthropic's
/// Messages API the same: the `tool_use` block, `max_tokens` / `stop_sequence`.
#[test]
fn a_call_cut_short_reads_the_same_streamed_or_whole() {
    let Some(s) = qwen_server() else { return };
    let tools = json!([{"type": "function", "function": {"name": "add",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
            "b": {"type": "integer"}}, "required": ["a", "b"]}}}]);
    let ask = json!([{"role": "user", "content": "Add 17 and 25."}]);
    let choice = json!({"type": "function", "function": {"name": "add"}});
    let cuts = [
        (json!({"max_tokens": 12}), "length", "max_tokens"),
        (
            json!({"max_tokens": 40, "stop": ["25"]}),
            "stop",
            "stop_sequence",
        ),
    ];
    for (cut, finish, stop_reason) in cuts {
        let mut body = json!({"messages": ask, "tools": tools, "tool_choice": choice,
            "temperature": 0});
        body.as_object_mut()
            .unwrap()
            .extend(cut.as_object().unwrap().clone());
        let whole = post(s.addr, "/v1/chat/completions", &body);
        assert_eq!(whole.status, 200, "{}", whole.text());
        let v = whole.json();
        let c0 = &v["choices"][0];
        assert_eq!(c0["finish_reason"], finish, "{v}");
        assert!(c0["message"]["content"].is_null(), "{v}");
        let calls = c0["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{v}");
        assert_eq!(calls[0]["function"]["name"], "add");
        let args = calls[0]["function"]["arguments"].as_str().unwrap();
        assert!(args.starts_with('{'), "{v}");
        assert!(serde_json::from_str::<Value>(args).is_err(), "not cut: {v}");

        let mut sbody = body.clone();
        sbody["stream"] = json!(true);
        let streamed = post(s.addr, "/v1/chat/completions", &sbody);
        assert_eq!(streamed.status, 200);
        let (got, got_finish) = reassemble(&streamed);
        assert_eq!(got, [("add".to_string(), args.to_string())]);
        assert_eq!(got_finish, finish);
        let content: String = chunks(&streamed.events())
            .iter()
            .filter_map(|c| {
                c["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(String::from)
            })
            .collect();
        assert_eq!(content, "", "the call's text repeated as content");

        let mut abody = json!({"model": QWEN, "messages": ask, "tool_choice": {"type": "tool", "name": "add"},
            "tools": [{"name": "add", "input_schema": tools[0]["function"]["parameters"]}]});
        abody["max_tokens"] = body["max_tokens"].clone();
        if let Some(stop) = body.get("stop") {
            abody["stop_sequences"] = stop.clone();
        }
        let m = post(s.addr, "/v1/messages", &abody).json();
        assert_eq!(m["stop_reason"], stop_reason, "{m}");
        assert_eq!(m["content"].as_array().unwrap().len(), 1, "{m}");
        assert_eq!(m["content"][0]["type"], "tool_use", "{m}");
        abody["stream"] = json!(true);
        let events = post(s.addr, "/v1/messages", &abody).text();
        let says = format!("\"stop_reason\":\"{stop_reason}\"");
        assert!(events.contains(&says), "{events}");
        assert!(!events.contains("text_delta"), "{events}");
    }
}

#[test]
fn an_unusable_tool_schema_names_the_tool() {
    let Some(s) = qwen_server() else { return };
    let mut tools = agent_tools();
    tools[1]["function"]["parameters"] =
        json!({"type": "object", "properties": {"x": {"type": "strin"}}});
    let e = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": "required"}),
    )
    .error(400);
    assert_eq!(e["param"], "tools[1].function.parameters", "{e}");
    assert_eq!(e["code"], "invalid_schema");
    assert!(e["message"].as_str().unwrap().contains("strin"), "{e}");
}

#[test]
fn response_format_errors_are_400s_naming_the_field() {
    let Some(s) = server() else { return };
    let msgs = json!([{"role": "user", "content": "hi"}]);
    for (rf, param) in [
        (json!({"type": "xml"}), "response_format.type"),
        (
            json!({"type": "json_schema"}),
            "response_format.json_schema",
        ),
        (
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 5, "maximum": 1}}}),
            "response_format.json_schema.schema",
        ),
        (
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/nope"}}}),
            "response_format.json_schema.schema",
        ),
    ] {
        for path in ["/v1/chat/completions", "/v1/completions"] {
            let body = if path.ends_with("chat/completions") {
                json!({"messages": msgs, "response_format": rf})
            } else {
                json!({"prompt": "hi", "response_format": rf})
            };
            let e = post(s.addr, path, &body).error(400);
            assert_eq!(e["param"], param, "{rf}: {e}");
        }
    }
}

#[test]
fn json_object_on_completions_and_stop_strings_under_a_schema() {
    let Some(s) = uncapped_server() else { return };
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "A JSON object describing a cat:", "temperature": 0, "max_tokens": 120,
                "response_format": {"type": "json_object"}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert!(
        serde_json::from_str::<Value>(text).unwrap().is_object(),
        "{text}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // DRY fields sent while DRY is off are ignored, also when a structured reply turns
    // DRY on by default (`dry_base` must be > 1 only when DRY is on).
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "A JSON object:", "max_tokens": 4, "dry_base": 0.5,
                "dry_sequence_breakers": [""], "response_format": {"type": "json_object"}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // A stop string still ends the reply, mid-object: the constraint does not hide it.
    let schema = json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["name", "age"],
        "additionalProperties": false});
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "A person, as JSON."}], "temperature": 0,
                "max_tokens": 60, "stop": [", \"age\""],
                "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}}),
    );
    let v = r.json();
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.starts_with("{\"name\": \""), "{content}");
    assert!(!content.contains("age"), "{content}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

/// Llama 3 JSON calls have no opening text, so a forced call is the grammar alone:
/// SmolLM2 served with `--tool-syntax llama3_json` (its template does not even show the
/// tools) still answers a forced call with a valid one.
#[test]
fn forced_calls_in_llama3_syntax_are_held_to_the_grammar() {
    let Some(s) = uncapped_server() else { return };
    let cfg = inferd_server::ServerConfig {
        tool_syntax: Some(inferd_tools::ToolSyntax::Llama3Json),
        ..Default::default()
    };
    let addr = serve(s.engine.clone(), s.template.clone(), cfg);
    let tools = agent_tools();
    for (choice, want) in [
        (
            json!({"type": "function", "function": {"name": "get_weather"}}),
            Some("get_weather"),
        ),
        (json!("required"), None),
    ] {
        let r = post(
            addr,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Weather in Rome?"}],
                    "tools": tools, "tool_choice": choice, "temperature": 0, "max_tokens": 100,
                    "parallel_tool_calls": false}),
        );
        let v = r.json();
        let c = &v["choices"][0];
        assert_eq!(c["finish_reason"], "tool_calls", "{v}");
        let calls = c["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{v}");
        let name = calls[0]["function"]["name"].as_str().unwrap();
        if let Some(w) = want {
            assert_eq!(name, w);
        }
        assert_valid_call(
            &tools,
            name,
            calls[0]["function"]["arguments"].as_str().unwrap(),
        );
    }
}
