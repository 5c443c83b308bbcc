//! One call object (`{"name": ..., "arguments": {...}}`), read a character at a time.
//!
//! Both parsers use this reader, so the complete and the streaming parse agree on what
//! a call is and on its arguments text. The reader never looks ahead: each character
//! either continues the object, ends it, or is rejected (and not consumed).

use crate::json::{Invalid, Scanner, Status};
use crate::syntax::json_ws;

/// What one character did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The object goes on.
    More,
    /// The character closed a valid call object.
    Done,
    /// The character cannot continue a valid call object; it is not consumed.
    Fail,
}

/// Which member a value belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Name,
    Args,
    /// Any other key, or a repeated `name` / `arguments`: checked, then dropped.
    Ignore,
}

#[derive(Clone, Debug)]
enum State {
    /// Before `{` (whitespace skipped).
    Open,
    /// A key or (if `close`) `}` must come.
    Key {
        close: bool,
    },
    InKey {
        scanner: Scanner,
        text: String,
    },
    Colon {
        target: Target,
    },
    Value {
        target: Target,
    },
    InValue {
        target: Target,
        scanner: Scanner,
    },
    /// After a member: `,` or `}`.
    After,
    Done,
}

/// Reads one call object.
#[derive(Clone, Debug)]
pub(crate) struct CallReader {
    state: State,
    name: Option<String>,
    /// Canonical text of the `name` value while it is read.
    name_text: String,
    /// Whether the arguments object has begun (its `{` was read).
    args_started: bool,
    args_done: bool,
    /// Canonical arguments text not yet taken.
    args: String,
    /// Output of ignored values (thrown away).
    scratch: String,
}

impl CallReader {
    pub(crate) fn new() -> CallReader {
        CallReader {
            state: State::Open,
            name: None,
            name_text: String::new(),
            args_started: false,
            args_done: false,
            args: String::new(),
            scratch: String::new(),
        }
    }

    /// The function name, once its string is complete.
    pub(crate) fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Whether the call can be announced: its name is known and its arguments object
    /// has begun. From here on, only a JSON syntax error or the end of the text can
    /// still make the object invalid.
    pub(crate) fn ready(&self) -> bool {
        self.name.is_some() && self.args_started
    }

    /// The canonical arguments text read and not yet passed on (the caller clears it
    /// once passed on).
    pub(crate) fn new_args(&mut self) -> &mut String {
        &mut self.args
    }

    /// Feeds one character.
    pub(crate) fn push(&mut self, c: char) -> Step {
        match self.step(c) {
            Ok(s) => s,
            Err(Invalid) => {
                self.state = State::Done;
                Step::Fail
            }
        }
    }

    fn step(&mut self, c: char) -> Result<Step, Invalid> {
        let state = std::mem::replace(&mut self.state, State::Done);
        self.state = match state {
            State::Open if json_ws(c) => State::Open,
            State::Open if c == '{' => State::Key { close: true },
            State::Open => return Err(Invalid),
            State::Key { close } => match c {
                _ if json_ws(c) => State::Key { close },
                '}' if close => return self.close(),
                '"' => {
                    let mut scanner = Scanner::new();
                    let mut text = String::new();
                    scanner.push(c, &mut text)?;
                    State::InKey { scanner, text }
                }
                _ => return Err(Invalid),
            },
            State::InKey {
                mut scanner,
                mut text,
            } => match scanner.push(c, &mut text)? {
                Status::More => State::InKey { scanner, text },
                _ => {
                    let key: String = serde_json::from_str(&text).map_err(|_| Invalid)?;
                    State::Colon {
                        target: self.target(&key),
                    }
                }
            },
            State::Colon { target } => match c {
                _ if json_ws(c) => State::Colon { target },
                ':' => State::Value { target },
                _ => return Err(Invalid),
            },
            State::Value { target } if json_ws(c) => State::Value { target },
            State::Value { target } => {
                match (target, c) {
                    (Target::Name, '"') | (Target::Ignore, _) => {}
                    (Target::Args, '{') => self.args_started = true,
                    _ => return Err(Invalid),
                }
                let mut scanner = Scanner::new();
                self.feed(target, &mut scanner, c)?;
                State::InValue { target, scanner }
            }
            State::InValue {
                target,
                mut scanner,
            } => match self.feed(target, &mut scanner, c)? {
                Status::More => State::InValue { target, scanner },
                Status::Done => {
                    self.value_done(target)?;
                    State::After
                }
                Status::DoneBefore => {
                    self.value_done(target)?;
                    self.state = State::After;
                    return self.step(c);
                }
            },
            State::After => match c {
                _ if json_ws(c) => State::After,
                ',' => State::Key { close: false },
                '}' => return self.close(),
                _ => return Err(Invalid),
            },
            State::Done => return Err(Invalid),
        };
        Ok(Step::More)
    }

    fn target(&self, key: &str) -> Target {
        match key {
            "name" if self.name.is_none() && self.name_text.is_empty() => Target::Name,
            "arguments" | "parameters" if !self.args_started => Target::Args,
            _ => Target::Ignore,
        }
    }

    fn feed(&mut self, target: Target, scanner: &mut Scanner, c: char) -> Result<Status, Invalid> {
        let out = match target {
            Target::Name => &mut self.name_text,
            Target::Args => &mut self.args,
            Target::Ignore => &mut self.scratch,
        };
        let status = scanner.push(c, out);
        self.scratch.clear();
        status
    }

    fn value_done(&mut self, target: Target) -> Result<(), Invalid> {
        match target {
            Target::Name => {
                let name: String = serde_json::from_str(&self.name_text).map_err(|_| Invalid)?;
                if name.is_empty() {
                    return Err(Invalid);
                }
                self.name = Some(name);
            }
            Target::Args => self.args_done = true,
            Target::Ignore => {}
        }
        Ok(())
    }

    fn close(&mut self) -> Result<Step, Invalid> {
        if self.name.is_some() && self.args_done {
            self.state = State::Done;
            Ok(Step::Done)
        } else {
            Err(Invalid)
        }
    }
}

/// A call read from the start of a text by [`read_call`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReadCall {
    pub(crate) name: String,
    pub(crate) arguments: String,
    /// Bytes of the text the call used (up to and including its `}`).
    pub(crate) len: usize,
}

/// Reads a call object at the start of `text` (leading JSON whitespace skipped).
/// `Err(at)`: no valid call; `at` is the byte where it failed (the rejected character,
/// or the end of the text), so `text[..at]` is what the reader consumed.
pub(crate) fn read_call(text: &str) -> Result<ReadCall, usize> {
    let mut r = CallReader::new();
    for (i, c) in text.char_indices() {
        match r.push(c) {
            Step::More => {}
            Step::Done => {
                return Ok(ReadCall {
                    name: r.name.take().unwrap_or_default(),
                    arguments: std::mem::take(r.new_args()),
                    len: i + c.len_utf8(),
                })
            }
            Step::Fail => return Err(i),
        }
    }
    Err(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> (String, String) {
        let c = read_call(text).unwrap_or_else(|at| panic!("{text:?} failed at {at}"));
        (c.name, c.arguments)
    }

    #[test]
    fn reads_name_and_arguments_in_either_order() {
        let want = ("f".to_string(), r#"{"a":1}"#.to_string());
        assert_eq!(ok(r#" {"name": "f", "arguments": {"a": 1}}"#), want);
        assert_eq!(ok(r#"{"arguments": {"a": 1}, "name": "f"}"#), want);
        assert_eq!(ok(r#"{"name": "f", "parameters": {"a": 1}}"#), want);
        // Other keys and repeats are ignored; the first name and arguments win.
        assert_eq!(
            ok(
                r#"{"id": [1, {"x": 2.0}], "name": "f", "arguments": {"a": 1}, "name": 3, "parameters": 7}"#
            ),
            want
        );
    }

    #[test]
    fn rejects_what_is_not_a_call() {
        for (text, at) in [
            (r#"x"#, 0),
            (r#"{"name": "f"}"#, 12),
            (r#"{"arguments": {}}"#, 16),
            (r#"{"name": "", "arguments": {}}"#, 10),
            (r#"{"name": 1, "arguments": {}}"#, 9),
            (r#"{"name": "f", "arguments": "{}"}"#, 27),
            (r#"{"name": "f", "arguments": {"a": 1,}}"#, 35),
            (r#"{"name": "f", "arguments": {"a": 1}"#, 35),
        ] {
            assert_eq!(read_call(text), Err(at), "{text}");
        }
    }

    #[test]
    fn is_ready_once_name_and_arguments_have_begun() {
        let mut r = CallReader::new();
        let text = r#"{"name": "f", "arguments": {"a": 1}}"#;
        let brace = text.rfind("{\"a").unwrap();
        for (i, c) in text.char_indices() {
            assert_eq!(r.ready(), i > brace, "at {i}");
            r.push(c);
        }
    }
}
