//! The complete parse: a finished reply -> content and tool calls.

use crate::call::read_call;
use crate::ids::CallIds;
use crate::syntax::{json_ws, ToolSyntax, HERMES_CLOSE, HERMES_OPEN, PYTHON_TAG};

/// One tool call the model made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// `call_` + 24 letters and digits, unique per call.
    pub id: String,
    pub name: String,
    /// The arguments object as compact JSON text: what `serde_json::to_string` writes for
    /// the parsed object (key order as the model wrote it; duplicate keys are kept).
    pub arguments: String,
}

/// A reply split into content and tool calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The text that is not a call; `None` when there is none.
    pub content: Option<String>,
    /// In the order the model wrote them.
    pub tool_calls: Vec<ToolCall>,
}

impl Parsed {
    /// A reply's stream events merged into what the reply holds: content concatenated,
    /// calls in the order they were announced, each with its arguments (what
    /// [`parse`] gives for the same text, but for a call the stream announced and
    /// then saw break or cut short: see [`crate::ToolStream`]).
    pub fn from_events(events: impl IntoIterator<Item = crate::StreamEvent>) -> Parsed {
        use crate::StreamEvent::*;
        let mut content = String::new();
        let mut calls: Vec<ToolCall> = Vec::new();
        for e in events {
            match e {
                Content(t) => content.push_str(&t),
                CallStart { id, name, .. } => calls.push(ToolCall {
                    id,
                    name,
                    arguments: String::new(),
                }),
                // A stream's calls are indexed from 0 in announcement order.
                CallArgs { index, fragment } => match calls.get_mut(index) {
                    Some(c) => c.arguments.push_str(&fragment),
                    None => debug_assert!(false, "arguments of call {index} before its start"),
                },
            }
        }
        Parsed {
            content: (!content.is_empty()).then_some(content),
            tool_calls: calls,
        }
    }
}

/// Parses a complete reply with fresh call ids. Text that does not form a valid call
/// (invalid JSON included) stays content: no text is lost.
pub fn parse(syntax: ToolSyntax, text: &str) -> Parsed {
    parse_with_ids(syntax, text, &mut CallIds::new())
}

/// [`parse`] with the caller's id source (a [`CallIds::seeded`] one gives fixed ids).
pub fn parse_with_ids(syntax: ToolSyntax, text: &str, ids: &mut CallIds) -> Parsed {
    let mut p = Parser {
        content: String::new(),
        calls: Vec::new(),
        ids,
    };
    match syntax {
        ToolSyntax::Hermes => p.hermes(text),
        ToolSyntax::Llama3Json => p.llama3(text),
    }
    Parsed {
        content: (!p.content.is_empty()).then_some(p.content),
        tool_calls: p.calls,
    }
}

struct Parser<'a> {
    content: String,
    calls: Vec<ToolCall>,
    ids: &'a mut CallIds,
}

impl Parser<'_> {
    fn call(&mut self, name: String, arguments: String) {
        let id = self.ids.next_id();
        self.calls.push(ToolCall {
            id,
            name,
            arguments,
        });
    }

    /// Text between calls: whitespace next to a call is not content.
    fn text(&mut self, s: &str, after_call: bool, before_call: bool) {
        let s = if after_call { s.trim_start() } else { s };
        let s = if before_call { s.trim_end() } else { s };
        self.content.push_str(s);
    }

    fn hermes(&mut self, text: &str) {
        let mut pos = 0;
        let mut after_call = false;
        while let Some(i) = text[pos..].find(HERMES_OPEN) {
            let marker = pos + i;
            let body = marker + HERMES_OPEN.len();
            match read_call(&text[body..]) {
                Ok(c) => {
                    self.text(&text[pos..marker], after_call, true);
                    self.call(c.name, c.arguments);
                    // Whitespace, then the closing tag if it is there.
                    let end = body + c.len;
                    let rest = &text[end..];
                    let tag = end + (rest.len() - rest.trim_start_matches(json_ws).len());
                    pos = if text[tag..].starts_with(HERMES_CLOSE) {
                        tag + HERMES_CLOSE.len()
                    } else {
                        tag
                    };
                    after_call = true;
                }
                Err(at) => {
                    // Not a call: the tag and what the reader took are content.
                    self.text(&text[pos..marker], after_call, false);
                    self.content.push_str(&text[marker..body + at]);
                    pos = body + at;
                    after_call = false;
                }
            }
        }
        self.text(&text[pos..], after_call, false);
    }

    fn llama3(&mut self, text: &str) {
        let lead = text.len() - text.trim_start().len();
        let mut pos = if text[lead..].starts_with(PYTHON_TAG) {
            lead + PYTHON_TAG.len()
        } else if text[lead..].starts_with('{') {
            lead
        } else {
            self.content.push_str(text);
            return;
        };
        // Where the element being read starts: from there on, a failure is content.
        let mut element = 0;
        loop {
            match read_call(&text[pos..]) {
                Ok(c) => {
                    self.call(c.name, c.arguments);
                    pos += c.len;
                }
                Err(_) => {
                    self.content.push_str(&text[element..]);
                    return;
                }
            }
            pos = skip_json_ws(text, pos);
            if pos == text.len() {
                return;
            }
            if !text[pos..].starts_with(';') {
                self.content.push_str(&text[pos..]);
                return;
            }
            element = pos;
            pos = skip_json_ws(text, pos + 1);
            if pos == text.len() {
                // A trailing `;` ends the list.
                return;
            }
            if !text[pos..].starts_with('{') {
                self.content.push_str(&text[element..]);
                return;
            }
        }
    }
}

fn skip_json_ws(text: &str, pos: usize) -> usize {
    let rest = &text[pos..];
    pos + (rest.len() - rest.trim_start_matches(json_ws).len())
}
