//! Streaming behaviour beyond equality with the complete parse: what is emitted when,
//! and the calls that fail after they were announced.

mod common;

use common::{complete, fold, stream};
use inferd_tools::{CallIds, StreamEvent, ToolStream, ToolSyntax};

fn content(s: &str) -> StreamEvent {
    StreamEvent::Content(s.to_string())
}

fn args(index: usize, s: &str) -> StreamEvent {
    StreamEvent::CallArgs {
        index,
        fragment: s.to_string(),
    }
}

fn is_start(e: &StreamEvent, name: &str) -> bool {
    matches!(e, StreamEvent::CallStart { name: n, .. } if n == name)
}

#[test]
fn content_is_emitted_as_soon_as_it_cannot_be_a_marker() {
    let mut s = ToolStream::new(ToolSyntax::Hermes);
    assert_eq!(s.push("Hello"), [content("Hello")]);
    // Trailing whitespace and a partial marker wait.
    assert_eq!(s.push(" there <tool_"), [content(" there")]);
    assert_eq!(s.push("x"), [content(" <tool_x")]);
    assert_eq!(s.push(" <"), []);
    assert_eq!(s.push("b>"), [content(" <b>")]);
    assert_eq!(s.finish(), []);

    let mut s = ToolStream::new(ToolSyntax::Llama3Json);
    assert_eq!(s.push("  "), []);
    assert_eq!(s.push("<|py"), []);
    assert_eq!(s.push("thon_t"), []);
    // Not the tag: the reply is plain content from here on.
    assert_eq!(s.push("ab"), [content("  <|python_tab")]);
    assert_eq!(s.push("{\"a\""), [content("{\"a\"")]);

    let mut s = ToolStream::new(ToolSyntax::Llama3Json);
    assert_eq!(s.push("Sure"), [content("Sure")]);
    assert_eq!(s.push(" {"), [content(" {")]);
}

#[test]
fn arguments_stream_before_the_call_ends() {
    let mut s = ToolStream::with_ids(ToolSyntax::Hermes, CallIds::seeded(1));
    assert_eq!(s.push("<tool_call>\n{\"name\": \"write\", "), []);
    let ev = s.push("\"arguments\": {\"text\": \"abc");
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert!(is_start(&ev[0], "write"));
    assert_eq!(ev[1], args(0, "{\"text\":\"abc"));
    assert_eq!(s.push("def\\n"), [args(0, "def\\n")]);
    // An unfinished escape or number waits for its end.
    assert_eq!(s.push("\\u00"), []);
    assert_eq!(s.push("e9\", \"n\": 12"), [args(0, "é\",\"n\":")]);
    assert_eq!(s.push("3}}"), [args(0, "123}")]);
    assert_eq!(s.push("\n</tool_call>"), []);
    assert_eq!(s.finish(), []);
    assert_eq!(s.calls_started(), 1);
}

#[test]
fn arguments_before_the_name_are_held_until_it_is_known() {
    let mut s = ToolStream::with_ids(ToolSyntax::Hermes, CallIds::seeded(1));
    assert_eq!(s.push("<tool_call>{\"arguments\": {\"a\": [1, 2]}, "), []);
    let ev = s.push("\"name\": \"f\"}");
    assert!(is_start(&ev[0], "f"), "{ev:?}");
    assert_eq!(ev[1..], [args(0, "{\"a\":[1,2]}")]);
}

#[test]
fn ids_match_the_complete_parse_with_the_same_seed() {
    let text = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>";
    let streamed = fold(&stream(ToolSyntax::Hermes, &[text]));
    assert_eq!(streamed, complete(ToolSyntax::Hermes, text));
    // Fresh generators give fresh ids.
    let a = inferd_tools::parse(ToolSyntax::Hermes, text);
    let b = inferd_tools::parse(ToolSyntax::Hermes, text);
    assert_ne!(a.tool_calls[0].id, b.tool_calls[0].id);
    let mut ids = CallIds::new();
    let many: std::collections::HashSet<String> = (0..10_000).map(|_| ids.next_id()).collect();
    assert_eq!(many.len(), 10_000);
}

/// A call that breaks after it was announced: the announcement stays, its whole text
/// also comes out as content, and the complete parse (which sees the end first) reports
/// the text as content only. A call the reply's end cuts short stays a call, with the
/// arguments so far and no content.
#[test]
fn a_call_broken_after_its_announcement_cannot_be_retracted() {
    let text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1,}}\n</tool_call>";
    let ev = stream(ToolSyntax::Hermes, &[text]);
    assert!(is_start(&ev[0], "f"), "{ev:?}");
    assert_eq!(ev[1..], [args(0, "{\"a\":1,"), content(text)]);
    let p = complete(ToolSyntax::Hermes, text);
    assert_eq!((p.content.as_deref(), p.tool_calls.len()), (Some(text), 0));

    // Cut off by the token limit inside the arguments.
    let text = "Calling.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"long";
    let mut s = ToolStream::with_ids(ToolSyntax::Hermes, CallIds::seeded(1));
    let ev = s.push(text);
    assert_eq!(ev[0], content("Calling."));
    assert!(is_start(&ev[1], "f"));
    assert_eq!(ev[2], args(0, "{\"a\":\"long"));
    assert!(!s.cut_short());
    assert_eq!(s.finish(), []);
    assert_eq!((s.calls_started(), s.cut_short()), (1, true));
    // The next reply starts uncut.
    assert_eq!(s.push("b"), [content("b")]);
    s.finish();
    assert!(!s.cut_short());
    // Cut before its announcement (the name unfinished), it is content.
    let text = "<tool_call>\n{\"name\": \"f";
    let mut s = ToolStream::new(ToolSyntax::Hermes);
    assert_eq!(s.push(text), []);
    assert_eq!(s.finish(), [content(text)]);
    assert!(!s.cut_short());

    // Llama 3: the same, and the rest of the reply is content.
    let text = r#"{"name": "f", "parameters": {"x": 1,}} tail"#;
    let ev = stream(ToolSyntax::Llama3Json, &[text]);
    assert!(is_start(&ev[0], "f"));
    assert_eq!(ev[1..], [args(0, "{\"x\":1,"), content(text)]);
}

#[test]
fn finish_ends_the_reply() {
    let mut s = ToolStream::new(ToolSyntax::Hermes);
    assert_eq!(s.push("a <tool_c"), [content("a")]);
    assert_eq!(s.finish(), [content(" <tool_c")]);
    // A new reply starts from scratch.
    assert_eq!(s.push("b"), [content("b")]);
    assert_eq!(s.finish(), []);
}
