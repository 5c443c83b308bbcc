//! Chat template tests: byte-exact comparison with transformers' renders (committed fixtures),
//! error reporting, config parsing, and the GGUF/tokenizer_config loaders.

use serde_json::{json, Map, Value};

use super::*;
use crate::test_support::{
    fixture_json, fixtures_dir, qwen3_tokenizer_dir, smollm2_gguf, tiny_gguf,
};

fn input_of(case: &Value) -> ChatInput<'_> {
    ChatInput {
        messages: &case["messages"],
        tools: case.get("tools"),
        add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
        extra: case
            .get("extra")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
    }
}

/// Renders every case of `chat_<name>.json` with `tmpl` and compares byte for byte.
fn check_fixture(tmpl: &ChatTemplate, fixture: &Value) -> usize {
    let mut failures = Vec::new();
    let cases = fixture["cases"].as_array().unwrap();
    for case in cases {
        let want = case["expected"].as_str().unwrap();
        match tmpl.render(&input_of(case)) {
            Ok(got) if got == want => {}
            Ok(got) => failures.push(format!(
                "{}:\n--- got\n{got}\n--- want\n{want}",
                case["name"]
            )),
            Err(e) => failures.push(format!("{}: {e}", case["name"])),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    cases.len()
}

fn fixture_template(name: &str) -> (ChatTemplate, Value) {
    let fixture = fixture_json(&format!("chat_{name}.json"));
    let path = fixtures_dir().join(fixture["template"].as_str().unwrap());
    let source = std::fs::read_to_string(&path).unwrap();
    let tmpl = ChatTemplate::new(
        &source,
        fixture["bos_token"].as_str(),
        fixture["eos_token"].as_str(),
    )
    .unwrap();
    (tmpl, fixture)
}

#[test]
fn smollm2_template_matches_transformers() {
    let (tmpl, fixture) = fixture_template("smollm2");
    assert!(check_fixture(&tmpl, &fixture) >= 6);
}

#[test]
fn qwen25_template_matches_transformers() {
    let (tmpl, fixture) = fixture_template("qwen2.5");
    assert!(check_fixture(&tmpl, &fixture) >= 8);
}

#[test]
fn qwen3_template_matches_transformers() {
    let (tmpl, fixture) = fixture_template("qwen3");
    assert!(check_fixture(&tmpl, &fixture) >= 12);
}

fn render(source: &str, messages: Value, extra: Map<String, Value>) -> Result<String, TextError> {
    let tmpl = ChatTemplate::new(source, Some("<s>"), Some("</s>"))?;
    let mut input = ChatInput::new(&messages);
    input.extra = extra;
    tmpl.render(&input)
}

#[test]
fn jinja2_semantics() {
    let msgs = json!([{"role": "user", "content": "hi"}]);
    // trim_blocks + lstrip_blocks: block tags take their line with them.
    let src = "{% for m in messages %}\n  {% if m.role == 'user' %}\n[{{ m.content }}]\n  {% endif %}\n{% endfor %}\n";
    assert_eq!(render(src, msgs.clone(), Map::new()).unwrap(), "[hi]\n");
    // Python printing, bos/eos, generation flag, tools = none, extra kwargs, loop controls.
    // Expected strings here were rendered by transformers' render_jinja_template.
    let src = "{{ bos_token }}{{ true }} {{ none }} {{ 1.5e-5 }} {{ [1, 'a'] }} {{ {'k': false} }} \
               {{ add_generation_prompt }} {{ tools is none }} {{ flag }}\
               {% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}{{ eos_token }}";
    let mut extra = Map::new();
    extra.insert("flag".into(), json!("on"));
    assert_eq!(
        render(src, msgs.clone(), extra).unwrap(),
        "<s>True None 1.5e-05 [1, 'a'] {'k': False} True True on01</s>"
    );
    // Python string methods (pycompat) and tojson keeping key order.
    let src =
        "{{ '  a,b '.strip().split(',') }} {{ 'x'.upper() }} {{ {'z': 1, 'a': 'é'} | tojson }} \
               {{ {'a': [1]} | tojson(indent=2) }}";
    assert_eq!(
        render(src, msgs.clone(), Map::new()).unwrap(),
        "['a', 'b'] X {\"z\": 1, \"a\": \"é\"} {\n  \"a\": [\n    1\n  ]\n}"
    );
    // strftime_now gives a date; its format is checked in strftime.rs.
    let year = render("{{ strftime_now('%Y') }}", msgs, Map::new()).unwrap();
    assert_eq!(year.len(), 4);
    assert!(year.starts_with("20"));
}

#[test]
fn errors_are_reported() {
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let err = ChatTemplate::new("{% for m in messages %}", None, None).unwrap_err();
    assert!(matches!(err, TextError::TemplateSyntax(_)), "{err}");
    let err = render(
        "{% if messages[0].role == 'user' %}{{ raise_exception('Roles must alternate!') }}{% endif %}",
        msgs.clone(),
        Map::new(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, TextError::TemplateRender(m) if m.contains("Roles must alternate!")),
        "{err}"
    );
    let err = render("{{ messages }}", json!({"role": "user"}), Map::new()).unwrap_err();
    assert!(err.to_string().contains("array"), "{err}");
}

#[test]
fn named_templates_pick_tool_use_when_tools_are_given() {
    let dir = std::env::temp_dir().join(format!("inferd-text-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokenizer_config.json");
    let cfg = json!({
        "bos_token": {"content": "<s>", "lstrip": false},
        "eos_token": "</s>",
        "chat_template": [
            {"name": "default", "template": "D{{ bos_token }}{{ eos_token }}"},
            {"name": "tool_use", "template": "T{{ tools | length }}"}
        ]
    });
    std::fs::write(&path, cfg.to_string()).unwrap();
    let tmpl = ChatTemplate::from_tokenizer_config(&path).unwrap().unwrap();
    let msgs = json!([]);
    let tools = json!([{"type": "function"}]);
    let mut input = ChatInput::new(&msgs);
    assert_eq!(tmpl.render(&input).unwrap(), "D<s></s>");
    input.tools = Some(&tools);
    assert_eq!(tmpl.render(&input).unwrap(), "T1");

    // No chat_template in the config: chat_template.jinja next to it.
    std::fs::write(&path, json!({"eos_token": "</s>"}).to_string()).unwrap();
    assert!(ChatTemplate::from_tokenizer_config(&path)
        .unwrap()
        .is_none());
    std::fs::write(dir.join("chat_template.jinja"), "J{{ eos_token }}").unwrap();
    let tmpl = ChatTemplate::from_tokenizer_config(&path).unwrap().unwrap();
    assert_eq!(tmpl.render(&ChatInput::new(&msgs)).unwrap(), "J</s>");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn tiny_gguf_template_uses_tokenizer_eos() {
    let gguf = tiny_gguf("smollm", false);
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let tmpl = ChatTemplate::from_gguf(&gguf, &tok)
        .unwrap()
        .expect("template");
    let msgs = json!([{"role": "user", "content": "hi"}]);
    assert_eq!(
        tmpl.render(&ChatInput::new(&msgs)).unwrap(),
        "<user>hi<|im_end|>"
    );
}

#[test]
fn smollm2_gguf_template_is_the_fixture() {
    let Some(path) = smollm2_gguf() else { return };
    let gguf = inferd_formats::GgufFile::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let tmpl = ChatTemplate::from_gguf(&gguf, &tok)
        .unwrap()
        .expect("template");
    check_fixture(&tmpl, &fixture_json("chat_smollm2.json"));
}

#[test]
fn qwen3_tokenizer_config_template_is_the_fixture() {
    let Some(dir) = qwen3_tokenizer_dir() else {
        return;
    };
    let tmpl = ChatTemplate::from_tokenizer_config(&dir.join("tokenizer_config.json"))
        .unwrap()
        .unwrap();
    assert_eq!(tmpl.eos_token(), Some("<|im_end|>"));
    assert_eq!(tmpl.bos_token(), None);
    check_fixture(&tmpl, &fixture_json("chat_qwen3.json"));
}
