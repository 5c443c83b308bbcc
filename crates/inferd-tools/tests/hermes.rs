//! Hermes / Qwen replies: the complete parse, and the stream under every split.

mod common;

use common::{assert_serde_form, check_all_splits};
use inferd_tools::{Parsed, ToolSyntax::Hermes};

const WEATHER: &str = r#"{"city": "Paris", "unit": "celsius"}"#;

fn call(name: &str, args: &str) -> String {
    format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {args}}}\n</tool_call>")
}

fn names_and_args(p: &Parsed) -> Vec<(&str, &str)> {
    p.tool_calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.as_str()))
        .collect()
}

#[test]
fn one_call() {
    let p = check_all_splits(Hermes, &call("get_weather", WEATHER));
    assert_eq!(p.content, None);
    assert_eq!(
        names_and_args(&p),
        [("get_weather", r#"{"city":"Paris","unit":"celsius"}"#)]
    );
    assert_serde_form(&p.tool_calls[0].arguments, WEATHER);
    let id = &p.tool_calls[0].id;
    assert!(id.starts_with("call_") && id.len() == 29, "{id}");
    assert!(id[5..].bytes().all(|b| b.is_ascii_alphanumeric()), "{id}");
}

#[test]
fn two_calls() {
    let text = format!(
        "{}\n{}",
        call("get_weather", WEATHER),
        call("get_time", r#"{"tz": "Europe/Paris"}"#)
    );
    let p = check_all_splits(Hermes, &text);
    assert_eq!(p.content, None);
    assert_eq!(
        names_and_args(&p),
        [
            ("get_weather", r#"{"city":"Paris","unit":"celsius"}"#),
            ("get_time", r#"{"tz":"Europe/Paris"}"#)
        ]
    );
    assert_ne!(p.tool_calls[0].id, p.tool_calls[1].id);
}

#[test]
fn content_then_call() {
    let text = format!(
        "Let me check the weather for you.\n{}",
        call("get_weather", WEATHER)
    );
    let p = check_all_splits(Hermes, &text);
    assert_eq!(
        p.content.as_deref(),
        Some("Let me check the weather for you.")
    );
    assert_eq!(p.tool_calls.len(), 1);
}

#[test]
fn think_block_stays_content() {
    let text = format!(
        "<think>\nThe user wants the weather, so I call get_weather.\n</think>\n\n{}",
        call("get_weather", WEATHER)
    );
    let p = check_all_splits(Hermes, &text);
    assert_eq!(
        p.content.as_deref(),
        Some("<think>\nThe user wants the weather, so I call get_weather.\n</think>")
    );
    assert_eq!(names_and_args(&p)[0].0, "get_weather");
    // A marker mentioned in the reasoning is not a call.
    let text = format!(
        "<think>I could emit <tool_call> here.</think>\n{}",
        call("f", "{}")
    );
    let p = check_all_splits(Hermes, &text);
    assert_eq!(
        p.content.as_deref(),
        Some("<think>I could emit <tool_call> here.</think>")
    );
    assert_eq!(names_and_args(&p), [("f", "{}")]);
}

#[test]
fn invalid_json_inside_tool_call_is_content() {
    for text in [
        "<tool_call>\n{\"name\": get_weather, \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{'name': 'get_weather', 'arguments': {}}\n</tool_call>",
        "<tool_call>\nget_weather(city=\"Paris\")\n</tool_call>",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{}\"}\n</tool_call>",
        "<tool_call>\n{\"name\": \"\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
        "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_wea",
        "<tool_call>",
        "<tool_ca",
    ] {
        let p = check_all_splits(Hermes, text);
        assert_eq!(p.content.as_deref(), Some(text));
        assert!(p.tool_calls.is_empty(), "{text}");
    }
    // A broken call between good ones keeps its place in the content.
    let text = format!(
        "A\n{}\nB <tool_call>{{oops}} C\n{}",
        call("f", "{}"),
        call("g", "{}")
    );
    let p = check_all_splits(Hermes, &text);
    assert_eq!(p.content.as_deref(), Some("AB <tool_call>{oops} C"));
    assert_eq!(names_and_args(&p), [("f", "{}"), ("g", "{}")]);
}

#[test]
fn plain_text_with_angle_brackets_is_content() {
    for text in [
        "",
        "Hello!",
        "a < b, <b>bold</b>, <tool>, </tool_call>",
        "  spaced  \n",
    ] {
        let p = check_all_splits(Hermes, text);
        assert_eq!(p.content.as_deref(), (!text.is_empty()).then_some(text));
        assert!(p.tool_calls.is_empty());
    }
}

#[test]
fn arguments_are_serde_json_compact_form() {
    let args = r#"{ "q" : "caf\u00e9 \"quoted\"\n\/", "n": 1E2, "neg": -0.50, "big": 12345678901234567890,
        "nested": {"z": [1, 2, {"b": null, "t": true}], "a": "😀 \ud83d\ude00"}, "q2": "\u001f" }"#;
    let p = check_all_splits(Hermes, &call("search", args));
    assert_eq!(p.tool_calls.len(), 1);
    assert_serde_form(&p.tool_calls[0].arguments, args);
    assert_eq!(
        p.tool_calls[0].arguments,
        r#"{"q":"café \"quoted\"\n/","n":100.0,"neg":-0.5,"big":12345678901234567890,"nested":{"z":[1,2,{"b":null,"t":true}],"a":"😀 😀"},"q2":"\u001f"}"#
    );
}

#[test]
fn closing_tag_may_be_missing_or_followed_by_text() {
    let text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n";
    let p = check_all_splits(Hermes, text);
    assert_eq!(p.content, None);
    assert_eq!(names_and_args(&p), [("f", r#"{"a":1}"#)]);

    let text = format!("{}\n\nDone, calling it now.", call("f", "{}"));
    let p = check_all_splits(Hermes, &text);
    assert_eq!(p.content.as_deref(), Some("Done, calling it now."));

    // Something else where the closing tag should be: the call stands, the rest is text.
    let text = "<tool_call>{\"name\": \"f\", \"arguments\": {}} junk</tool_call> end";
    let p = check_all_splits(Hermes, text);
    assert_eq!(names_and_args(&p), [("f", "{}")]);
    assert_eq!(p.content.as_deref(), Some("junk</tool_call> end"));

    // Two calls without a closing tag in between.
    let text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}<tool_call>{\"name\": \"g\", \"arguments\": {}}";
    let p = check_all_splits(Hermes, text);
    assert_eq!(p.content, None);
    assert_eq!(names_and_args(&p), [("f", "{}"), ("g", "{}")]);
}

#[test]
fn key_order_extra_keys_and_parameters() {
    let text = "<tool_call>\n{\"arguments\": {\"b\": 2, \"a\": 1}, \"id\": 5, \"name\": \"f\"}\n</tool_call>";
    let p = check_all_splits(Hermes, text);
    assert_eq!(names_and_args(&p), [("f", r#"{"b":2,"a":1}"#)]);
    let text = "<tool_call>{\"name\": \"f\", \"parameters\": {\"x\": [true]}}</tool_call>";
    let p = check_all_splits(Hermes, text);
    assert_eq!(names_and_args(&p), [("f", r#"{"x":[true]}"#)]);
}

#[test]
fn long_code_argument() {
    let code = "fn main() {\n    let s = \"<tool_call>\";\n    println!(\"{s} \\\\ done\");\n}\n"
        .repeat(3);
    let args = serde_json::json!({"path": "src/main.rs", "content": code}).to_string();
    let p = check_all_splits(
        Hermes,
        &format!("Writing the file.\n{}", call("write_file", &args)),
    );
    assert_eq!(p.content.as_deref(), Some("Writing the file."));
    assert_eq!(p.tool_calls[0].arguments, args);
    let back: serde_json::Value = serde_json::from_str(&p.tool_calls[0].arguments).unwrap();
    assert_eq!(back["content"], code);
}
