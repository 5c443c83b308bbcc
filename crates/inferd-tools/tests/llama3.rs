//! Llama 3.1 / 3.2 JSON replies: the complete parse, and the stream under every split.

mod common;

use common::{assert_serde_form, check_all_splits};
use inferd_tools::{Parsed, ToolSyntax::Llama3Json};

fn names_and_args(p: &Parsed) -> Vec<(&str, &str)> {
    p.tool_calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.as_str()))
        .collect()
}

#[test]
fn call_without_python_tag() {
    let args = r#"{"city": "Paris", "days": 3}"#;
    let text = format!(r#"{{"name": "get_weather", "parameters": {args}}}"#);
    let p = check_all_splits(Llama3Json, &text);
    assert_eq!(p.content, None);
    assert_eq!(
        names_and_args(&p),
        [("get_weather", r#"{"city":"Paris","days":3}"#)]
    );
    assert_serde_form(&p.tool_calls[0].arguments, args);
    // Leading whitespace is not content.
    let p = check_all_splits(Llama3Json, &format!("\n\n {text}\n"));
    assert_eq!(p.content, None);
    assert_eq!(p.tool_calls.len(), 1);
}

#[test]
fn call_with_python_tag() {
    let text = r#"<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}"#;
    let p = check_all_splits(Llama3Json, text);
    assert_eq!(p.content, None);
    assert_eq!(names_and_args(&p), [("get_weather", r#"{"city":"Paris"}"#)]);
    let p = check_all_splits(Llama3Json, &format!(" <|python_tag|> \n{}", &text[14..]));
    assert_eq!(p.tool_calls.len(), 1);
}

#[test]
fn parameters_or_arguments() {
    for key in ["parameters", "arguments"] {
        let text = format!(r#"{{"name": "f", "{key}": {{"x": [1, 2]}}}}"#);
        let p = check_all_splits(Llama3Json, &text);
        assert_eq!(names_and_args(&p), [("f", r#"{"x":[1,2]}"#)], "{key}");
    }
}

#[test]
fn several_calls_separated_by_semicolons() {
    let text = r#"<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}};{"name": "c", "arguments": {"y": "z"}}"#;
    let p = check_all_splits(Llama3Json, text);
    assert_eq!(p.content, None);
    assert_eq!(
        names_and_args(&p),
        [("a", "{}"), ("b", r#"{"x":1}"#), ("c", r#"{"y":"z"}"#)]
    );
    let ids: std::collections::HashSet<_> = p.tool_calls.iter().map(|c| &c.id).collect();
    assert_eq!(ids.len(), 3);
    // A trailing `;` ends the list.
    let p = check_all_splits(Llama3Json, r#"{"name": "a", "parameters": {}}; "#);
    assert_eq!((p.content, p.tool_calls.len()), (None, 1));
}

#[test]
fn plain_replies_are_content() {
    for text in [
        "",
        "   ",
        "The weather in Paris is sunny.",
        "  Sure: {\"name\": \"f\", \"parameters\": {}}",
        "<b>bold</b>",
        "<|python_tag|>brave_search.call(query=\"paris weather\")",
        r#"{"result": 42}"#,
        r#"{"name": "Bob", "age": 5}"#,
        "<|python_",
    ] {
        let p = check_all_splits(Llama3Json, text);
        assert_eq!(p.content.as_deref(), (!text.is_empty()).then_some(text));
        assert!(p.tool_calls.is_empty(), "{text}");
    }
}

#[test]
fn text_after_the_calls_is_content() {
    let p = check_all_splits(Llama3Json, r#"{"name": "a", "parameters": {}}  thanks!"#);
    assert_eq!(names_and_args(&p), [("a", "{}")]);
    assert_eq!(p.content.as_deref(), Some("thanks!"));
    // From the first element that is not a call on, everything is content.
    let p = check_all_splits(
        Llama3Json,
        r#"{"name": "a", "parameters": {}} ; nope; {"name": "b", "parameters": {}}"#,
    );
    assert_eq!(names_and_args(&p), [("a", "{}")]);
    assert_eq!(
        p.content.as_deref(),
        Some(r#"; nope; {"name": "b", "parameters": {}}"#)
    );
    let p = check_all_splits(
        Llama3Json,
        r#"{"name": "a", "parameters": {}}; {"name": 1, "parameters": {}}"#,
    );
    assert_eq!(
        p.content.as_deref(),
        Some(r#"; {"name": 1, "parameters": {}}"#)
    );
}
