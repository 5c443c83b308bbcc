//! `tools`, `tool_choice` and tool messages: accepted shapes, and errors that name the
//! parameter.

use inferd_tools::{check_messages, valid_name, ToolChoice, ToolError, ToolRequest};
use serde_json::{json, Value};

fn weather() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }})
}

fn tool(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name}})
}

fn err(tools: Option<Value>, choice: Option<Value>) -> ToolError {
    ToolRequest::parse(tools.as_ref(), choice.as_ref()).unwrap_err()
}

#[test]
fn tools_and_choice_are_read() {
    let tools = json!([weather(), tool("get-time_2")]);
    let r = ToolRequest::parse(Some(&tools), None).unwrap().unwrap();
    assert_eq!(r.choice, ToolChoice::Auto);
    assert_eq!(r.tools.len(), 2);
    let w = r.tool("get_weather").unwrap();
    assert_eq!(w.description.as_deref(), Some("Weather in a city"));
    assert_eq!(w.parameters.as_ref().unwrap()["required"][0], "city");
    assert!(!w.strict);
    assert!(r.calls_allowed());

    for (c, want) in [
        (json!("auto"), ToolChoice::Auto),
        (json!("none"), ToolChoice::None),
        (json!("required"), ToolChoice::Required),
        (
            json!({"type": "function", "function": {"name": "get-time_2"}}),
            ToolChoice::Function("get-time_2".into()),
        ),
        (Value::Null, ToolChoice::Auto),
    ] {
        let r = ToolRequest::parse(Some(&tools), Some(&c)).unwrap().unwrap();
        assert_eq!(r.choice, want, "{c}");
        assert_eq!(r.calls_allowed(), want != ToolChoice::None);
    }
    assert_eq!(ToolRequest::parse(None, None).unwrap(), None);
    assert_eq!(
        ToolRequest::parse(Some(&Value::Null), Some(&Value::Null)).unwrap(),
        None
    );
}

#[test]
fn tool_errors_name_the_parameter() {
    let cases: Vec<(Value, &str)> = vec![
        (json!({"type": "function"}), "tools"),
        (json!([]), "tools"),
        (json!([weather(), "f"]), "tools[1]"),
        (
            json!([weather(), tool("f"), {"function": {"name": "g"}}]),
            "tools[2].type",
        ),
        (json!([{"type": "retrieval"}]), "tools[0].type"),
        (json!([{"type": "function"}]), "tools[0].function"),
        (
            json!([{"type": "function", "function": []}]),
            "tools[0].function",
        ),
        (
            json!([weather(), tool("get weather")]),
            "tools[1].function.name",
        ),
        (json!([tool("")]), "tools[0].function.name"),
        (json!([tool(&"x".repeat(65))]), "tools[0].function.name"),
        (
            json!([tool("f"), tool("g"), tool("f")]),
            "tools[2].function.name",
        ),
        (
            json!([{"type": "function", "function": {"name": 3}}]),
            "tools[0].function.name",
        ),
        (
            json!([{"type": "function", "function": {"description": "x"}}]),
            "tools[0].function.name",
        ),
        (
            json!([{"type": "function", "function": {"name": "f", "description": 1}}]),
            "tools[0].function.description",
        ),
        (
            json!([{"type": "function", "function": {"name": "f", "strict": "yes"}}]),
            "tools[0].function.strict",
        ),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters": "object"}}]),
            "tools[0].function.parameters",
        ),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters": {"type": 1}}}]),
            "tools[0].function.parameters.type",
        ),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]),
            "tools[0].function.parameters.type",
        ),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters": {"type": ["array", "null"]}}}]),
            "tools[0].function.parameters.type",
        ),
        (
            json!((0..129).map(|i| tool(&format!("f{i}"))).collect::<Vec<_>>()),
            "tools",
        ),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters": {"properties": []}}}]),
            "tools[0].function.parameters.properties",
        ),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": 1}}}}]),
            "tools[0].function.parameters.properties.a",
        ),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters": {"required": "a"}}}]),
            "tools[0].function.parameters.required",
        ),
    ];
    for (tools, param) in cases {
        let e = err(Some(tools.clone()), None);
        assert_eq!(e.param, param, "{tools}: {}", e.message);
        assert!(e.message.contains(param), "{}", e.message);
    }
    assert!(valid_name("a-Z_09") && !valid_name("a.b") && !valid_name("é"));
    // The most tools a request may offer, and object schemas however their type is given.
    let most = json!((0..128).map(|i| tool(&format!("f{i}"))).collect::<Vec<_>>());
    assert_eq!(
        ToolRequest::parse(Some(&most), None)
            .unwrap()
            .unwrap()
            .tools
            .len(),
        128
    );
    for ty in [json!("object"), json!(["object", "null"])] {
        let t =
            json!([{"type": "function", "function": {"name": "f", "parameters": {"type": ty}}}]);
        ToolRequest::parse(Some(&t), None).unwrap();
    }
}

#[test]
fn tool_choice_errors_name_the_parameter() {
    let tools = json!([weather()]);
    for (choice, param) in [
        (json!("any"), "tool_choice"),
        (json!(true), "tool_choice"),
        (
            json!({"type": "tool", "function": {"name": "get_weather"}}),
            "tool_choice.type",
        ),
        (json!({"type": "function"}), "tool_choice.function.name"),
        (
            json!({"type": "function", "function": {"name": "nope"}}),
            "tool_choice.function.name",
        ),
    ] {
        let e = err(Some(tools.clone()), Some(choice.clone()));
        assert_eq!(e.param, param, "{choice}: {}", e.message);
    }
    // Without tools, any tool_choice is an error, as with OpenAI.
    for choice in [json!("auto"), json!("none"), json!("required")] {
        let e = err(None, Some(choice));
        assert_eq!(e.param, "tool_choice");
        assert!(e.message.contains("`tools`"), "{}", e.message);
    }
}

#[test]
fn tool_messages_are_checked() {
    let good = json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "not json is allowed"}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
        {"role": "assistant", "content": "Sunny at noon.", "tool_calls": null},
        {"role": "assistant", "content": "ok"}
    ]);
    check_messages(&good).unwrap();

    let call = json!({"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}});
    let with = |path: &str, v: Value| {
        let mut c = call.clone();
        match path {
            "" => c = v,
            p => {
                let mut at = &mut c;
                let parts: Vec<&str> = p.split('.').collect();
                for k in &parts[..parts.len() - 1] {
                    at = &mut at[*k];
                }
                at[parts[parts.len() - 1]] = v;
            }
        }
        json!([{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call.clone(), c]}])
    };
    for (messages, param) in [
        (json!({"role": "user"}), "messages"),
        (
            json!([{"role": "tool", "content": "x"}]),
            "messages[0].tool_call_id",
        ),
        (
            json!([{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": 5, "content": "x"}]),
            "messages[1].tool_call_id",
        ),
        (
            json!([{"role": "tool", "tool_call_id": "", "content": "x"}]),
            "messages[0].tool_call_id",
        ),
        (
            json!([{"role": "tool", "tool_call_id": "c"}]),
            "messages[0].content",
        ),
        (
            json!([{"role": "tool", "tool_call_id": "c", "content": {"a": 1}}]),
            "messages[0].content",
        ),
        (
            json!([{"role": "tool", "tool_call_id": "c", "content": [{"type": "image_url"}]}]),
            "messages[0].content",
        ),
        (
            json!([{"role": "assistant", "tool_calls": {}}]),
            "messages[0].tool_calls",
        ),
        (
            json!([{"role": "assistant", "tool_calls": []}]),
            "messages[0].tool_calls",
        ),
        (with("", json!("c")), "messages[1].tool_calls[1]"),
        (with("id", Value::Null), "messages[1].tool_calls[1].id"),
        (
            with("type", json!("code")),
            "messages[1].tool_calls[1].type",
        ),
        (
            with("function", json!("f")),
            "messages[1].tool_calls[1].function",
        ),
        (
            with("function.name", json!(1)),
            "messages[1].tool_calls[1].function.name",
        ),
        (
            with("function.arguments", json!({"a": 1})),
            "messages[1].tool_calls[1].function.arguments",
        ),
    ] {
        let e = check_messages(&messages).unwrap_err();
        assert_eq!(e.param, param, "{messages}: {}", e.message);
        assert!(e.message.contains(param), "{}", e.message);
    }
}
