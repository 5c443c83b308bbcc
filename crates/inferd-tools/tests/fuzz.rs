//! Random replies built from marker and JSON fragments: the stream agrees with itself
//! under any split, and with the complete parse except for calls it announced before
//! they broke or the reply's end cut them short.

mod common;

use common::{boundaries, complete, cut, fold, stream, Lcg};
use inferd_tools::{ToolStream, ToolSyntax};

const PIECES: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "<|python_tag|>",
    "<tool_",
    "<",
    "\n",
    " ",
    "\t",
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    ";",
    "\"name\"",
    "\"arguments\"",
    "\"parameters\"",
    "\"f\"",
    "\"x\\n\\u00e9\"",
    "\"",
    "\\",
    "1",
    "-2.5e3",
    "0",
    "true",
    "null",
    "text",
    "é",
    "😀",
    "<think>",
    "{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": null}]}}",
    "{\"name\": \"g\", \"parameters\": {}}",
    "\"name\": \"h\", \"arguments\": {\"s\": \"v\"}}",
    "<tool_call>{\"name\": \"k\", \"arguments\": {\"a\": 1}}</tool_call>",
    "<tool_call>\n{\"name\": \"k\", \"arguments\": {",
    "{\"name\": \"m\", \"parameters\": {",
    "\"q\": ",
    ", \"z\": 3}}",
];

fn random_text(rng: &mut Lcg) -> String {
    (0..rng.below(14))
        .map(|_| PIECES[rng.below(PIECES.len())])
        .collect()
}

/// Returns whether the stream announced a call that then broke.
fn check(syntax: ToolSyntax, text: &str, rng: &mut Lcg) -> bool {
    let whole = stream(syntax, &[text]);
    let b = boundaries(text);
    for _ in 0..6 {
        let mut at: Vec<usize> = (0..rng.below(6) + 1)
            .filter_map(|_| b.get(rng.below(b.len())).copied())
            .collect();
        at.sort_unstable();
        at.dedup();
        assert_eq!(
            stream(syntax, &cut(text, &at)),
            whole,
            "{syntax} split {at:?}: {text:?}"
        );
    }
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(
        stream(syntax, &chars),
        whole,
        "{syntax} char by char: {text:?}"
    );

    let streamed = fold(&whole);
    let want = complete(syntax, text);
    let mut s = ToolStream::new(syntax);
    s.push(text);
    s.finish();
    if s.cut_short() {
        // A call the reply's end cut short stays a call in the stream, its text not
        // content; the complete parse reads that text as content.
        let (got, all) = (streamed.content.clone(), want.content.clone());
        let (got, all) = (got.unwrap_or_default(), all.unwrap_or_default());
        assert!(
            all.len() > got.len() && all.starts_with(&got),
            "{syntax}: stream content {got:?}, complete {all:?}: {text:?}"
        );
    } else {
        // The same text is content either way: a call broken after its announcement
        // is content in both, and is an extra call in the stream only.
        assert_eq!(streamed.content, want.content, "{syntax}: {text:?}");
    }
    let late = streamed.tool_calls.len() != want.tool_calls.len();
    if !late {
        assert_eq!(streamed, want, "{syntax}: {text:?}");
    } else {
        let mut rest = streamed.tool_calls.iter();
        for c in &want.tool_calls {
            assert!(
                rest.any(|s| s.name == c.name && s.arguments == c.arguments),
                "{syntax}: call {c:?} missing from the stream: {text:?}"
            );
        }
    }
    for c in &want.tool_calls {
        let v: serde_json::Value = serde_json::from_str(&c.arguments).unwrap();
        assert!(v.is_object());
        assert_eq!(serde_json::to_string(&v).unwrap(), c.arguments);
    }
    late
}

#[test]
fn random_replies() {
    let mut rng = Lcg(2024);
    let mut calls = [0usize; 2];
    let mut late = 0;
    for _ in 0..4000 {
        let text = random_text(&mut rng);
        for (k, syntax) in ToolSyntax::ALL.into_iter().enumerate() {
            late += usize::from(check(syntax, &text, &mut rng));
            calls[k] += complete(syntax, &text).tool_calls.len();
        }
    }
    // The generator does produce calls for both syntaxes.
    assert!(calls.iter().all(|&n| n > 100), "{calls:?}");
    // And calls that break after their announcement.
    assert!(late > 100, "{late}");
}
