//! The Hermes / Qwen state machine: text, `<tool_call>` calls, `</tool_call>`.

use super::pending::Pending;
use super::Out;
use crate::call::Step;
use crate::syntax::{json_ws, HERMES_CLOSE, HERMES_OPEN};

#[derive(Clone, Debug)]
pub(crate) enum Hermes {
    /// Content. `ws`: trailing whitespace held back; `tag`: a partial `<tool_call>`
    /// after it; `skip`: just after a call, leading whitespace is dropped.
    Text { ws: String, tag: String, skip: bool },
    /// Inside `<tool_call>`.
    Call(Pending),
    /// After a call object: whitespace, then `</tool_call>` (partially matched in `tag`).
    Close { tag: String },
}

impl Hermes {
    pub(crate) fn new() -> Hermes {
        Hermes::text(false)
    }

    fn text(skip: bool) -> Hermes {
        Hermes::Text {
            ws: String::new(),
            tag: String::new(),
            skip,
        }
    }

    pub(crate) fn push(&mut self, c: char, out: &mut Out) {
        // Text to feed again after a state change (a marker that did not match, or the
        // character a failed call did not consume).
        let refeed: String = match self {
            Hermes::Text { ws, tag, skip } => {
                if tag.is_empty() {
                    if *skip && c.is_whitespace() {
                        return;
                    }
                    *skip = false;
                    if c.is_whitespace() {
                        ws.push(c);
                    } else if HERMES_OPEN.starts_with(c) {
                        tag.push(c);
                    } else {
                        out.content(ws);
                        ws.clear();
                        out.content_char(c);
                    }
                    return;
                }
                tag.push(c);
                if tag == HERMES_OPEN {
                    let raw = std::mem::take(ws) + tag;
                    *self = Hermes::Call(Pending::new(raw));
                    return;
                }
                if HERMES_OPEN.starts_with(tag.as_str()) {
                    return;
                }
                // Not the marker: its first character is content; the rest may start one.
                out.content(ws);
                ws.clear();
                let held = std::mem::take(tag);
                let mut chars = held.chars();
                if let Some(first) = chars.next() {
                    out.content_char(first);
                }
                chars.collect()
            }
            Hermes::Call(p) => match p.push(c, out) {
                Step::More => return,
                Step::Done => {
                    *self = Hermes::Close { tag: String::new() };
                    return;
                }
                Step::Fail => {
                    let Hermes::Call(p) = std::mem::replace(self, Hermes::text(false)) else {
                        unreachable!()
                    };
                    p.fail(out);
                    c.to_string()
                }
            },
            Hermes::Close { tag } => {
                if tag.is_empty() && json_ws(c) {
                    return;
                }
                tag.push(c);
                if tag == HERMES_CLOSE {
                    *self = Hermes::text(true);
                    return;
                }
                if HERMES_CLOSE.starts_with(tag.as_str()) {
                    return;
                }
                // No closing tag: what came is text after the call.
                let held = std::mem::take(tag);
                *self = Hermes::text(true);
                held
            }
        };
        for c in refeed.chars() {
            self.push(c, out);
        }
    }

    pub(crate) fn finish(&mut self, out: &mut Out) {
        match std::mem::replace(self, Hermes::new()) {
            Hermes::Text { ws, tag, .. } => {
                out.content(&ws);
                out.content(&tag);
            }
            Hermes::Call(p) => p.cut(out),
            Hermes::Close { tag } => out.content(&tag),
        }
    }
}
