//! Telling the tool syntax from a model's chat template.

use inferd_tools::ToolSyntax;

fn template(name: &str) -> String {
    let path = format!(
        "{}/../../fixtures/text/templates/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn detect_on_real_templates() {
    assert_eq!(
        ToolSyntax::detect(&template("qwen2.5.jinja"), "qwen2"),
        Some(ToolSyntax::Hermes)
    );
    assert_eq!(
        ToolSyntax::detect(&template("qwen3.jinja"), "qwen3"),
        Some(ToolSyntax::Hermes)
    );
    // SmolLM2's template renders no tools at all.
    assert_eq!(
        ToolSyntax::detect(&template("smollm2.jinja"), "llama"),
        None
    );
}

#[test]
fn detect_llama3_style_templates() {
    // The parts of a Llama 3.1 / 3.2 template that matter (written here in short).
    let llama31 = r#"{%- if builtin_tools is defined or tool_calls %}{{- "<|python_tag|>" }}{%- endif %}
{{- '{"name": "' + tool_call.name + '", "parameters": ' + tool_call.arguments | tojson + '}' }}
{%- elif message.role == "tool" or message.role == "ipython" %}{{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}"#;
    assert_eq!(
        ToolSyntax::detect(llama31, "llama"),
        Some(ToolSyntax::Llama3Json)
    );
    let llama32 = r#"{{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
{%- if message.role == "ipython" %}{{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}{%- endif %}"#;
    assert_eq!(
        ToolSyntax::detect(llama32, "llama"),
        Some(ToolSyntax::Llama3Json)
    );
    // "parameters" alone (e.g. in a system prompt) is not enough.
    assert_eq!(
        ToolSyntax::detect(r#"{{ '"parameters"' }}<|start_header_id|>"#, "llama"),
        None
    );
}

#[test]
fn names_and_markers() {
    assert_eq!(ToolSyntax::from_name("hermes"), Some(ToolSyntax::Hermes));
    assert_eq!(ToolSyntax::from_name("Qwen"), Some(ToolSyntax::Hermes));
    assert_eq!(
        ToolSyntax::from_name("llama3_json"),
        Some(ToolSyntax::Llama3Json)
    );
    assert_eq!(ToolSyntax::from_name("mistral"), None);
    for s in ToolSyntax::ALL {
        assert_eq!(ToolSyntax::from_name(s.name()), Some(s));
        assert_eq!(s.to_string(), s.name());
    }
    assert_eq!(ToolSyntax::Hermes.call_open(), "<tool_call>\n");
    assert_eq!(ToolSyntax::Hermes.call_close(), "\n</tool_call>");
    assert_eq!(ToolSyntax::Llama3Json.call_open(), "");
    assert_eq!(ToolSyntax::Llama3Json.call_close(), "");
}

/// What a server forces for a call (`call_open`, the object, `call_close`) parses back.
#[test]
fn forced_call_text_parses() {
    for s in ToolSyntax::ALL {
        let text = format!(
            "{}{{\"name\": \"f\", \"arguments\": {{\"a\": 1}}}}{}",
            s.call_open(),
            s.call_close()
        );
        let p = inferd_tools::parse(s, &text);
        assert_eq!(p.content, None, "{s}");
        assert_eq!(p.tool_calls.len(), 1, "{s}");
        assert_eq!(p.tool_calls[0].arguments, r#"{"a":1}"#);
    }
}
