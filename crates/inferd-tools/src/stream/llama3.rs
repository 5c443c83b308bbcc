//! The Llama 3 JSON state machine: a reply of `;`-separated call objects, optionally
//! after `<|python_tag|>`, or plain content.

use super::pending::Pending;
use super::Out;
use crate::call::Step;
use crate::syntax::{json_ws, PYTHON_TAG};

#[derive(Clone, Debug)]
pub(crate) enum Llama3 {
    /// The start of the reply: leading whitespace `lead`, then maybe a partial
    /// `<|python_tag|>` in `tag`.
    Start { lead: String, tag: String },
    /// Inside a call object.
    Call(Pending),
    /// After a call: whitespace, then `;` or the end.
    After,
    /// After `;` (held in `raw` with the whitespace after it): the next call's `{`.
    Sep { raw: String },
    /// Everything from here on is content.
    Plain,
}

impl Llama3 {
    pub(crate) fn new() -> Llama3 {
        Llama3::Start {
            lead: String::new(),
            tag: String::new(),
        }
    }

    pub(crate) fn push(&mut self, c: char, out: &mut Out) {
        match self {
            Llama3::Start { lead, tag } if tag.is_empty() => {
                if c.is_whitespace() {
                    lead.push(c);
                } else if c == '{' {
                    let raw = std::mem::take(lead);
                    self.call(raw, c, out);
                } else if PYTHON_TAG.starts_with(c) {
                    tag.push(c);
                } else {
                    out.content(lead);
                    out.content_char(c);
                    *self = Llama3::Plain;
                }
            }
            Llama3::Start { lead, tag } => {
                tag.push(c);
                if tag == PYTHON_TAG {
                    let raw = std::mem::take(lead) + tag;
                    *self = Llama3::Call(Pending::new(raw));
                } else if !PYTHON_TAG.starts_with(tag.as_str()) {
                    out.content(lead);
                    out.content(tag);
                    *self = Llama3::Plain;
                }
            }
            Llama3::Call(p) => match p.push(c, out) {
                Step::More => {}
                Step::Done => *self = Llama3::After,
                Step::Fail => {
                    if let Llama3::Call(p) = std::mem::replace(self, Llama3::Plain) {
                        p.fail(out);
                    }
                    out.content_char(c);
                }
            },
            Llama3::After => {
                if c == ';' {
                    *self = Llama3::Sep { raw: c.to_string() };
                } else if !json_ws(c) {
                    out.content_char(c);
                    *self = Llama3::Plain;
                }
            }
            Llama3::Sep { raw } => {
                if json_ws(c) {
                    raw.push(c);
                } else if c == '{' {
                    let raw = std::mem::take(raw);
                    self.call(raw, c, out);
                } else {
                    out.content(raw);
                    out.content_char(c);
                    *self = Llama3::Plain;
                }
            }
            Llama3::Plain => out.content_char(c),
        }
    }

    /// Starts a call with held text `raw` and its first character `c` (`{`).
    fn call(&mut self, raw: String, c: char, out: &mut Out) {
        *self = Llama3::Call(Pending::new(raw));
        self.push(c, out);
    }

    pub(crate) fn finish(&mut self, out: &mut Out) {
        match std::mem::replace(self, Llama3::new()) {
            Llama3::Start { lead, tag } => {
                out.content(&lead);
                out.content(&tag);
            }
            Llama3::Call(p) => p.cut(out),
            // Whitespace after a call and a trailing `;` are not content.
            Llama3::After | Llama3::Sep { .. } | Llama3::Plain => {}
        }
    }
}
