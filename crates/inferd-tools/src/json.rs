//! One JSON value, read a character at a time: checked against the JSON grammar
//! (RFC 8259) and written out in canonical compact form as it goes.
//!
//! The canonical form is what `serde_json::to_string` writes for the parsed value, key
//! order kept: no whitespace; strings re-escaped as serde_json escapes them (`"`, `\`
//! and control characters only; `\u00e9` and `\/` become the characters themselves);
//! numbers as serde_json prints the number it reads (`1E2` -> `100.0`). It differs only
//! where a `Value` would lose text: a duplicate key is kept, not merged.
//!
//! Output is append-only and each piece is written as soon as the input fixes it: a
//! string's characters one by one (an escape once complete), a number or literal when
//! it ends, brackets and separators at once. So the output for a prefix of the input is
//! a prefix of the output for the whole, which is what lets tool-call arguments stream.

use serde_json::Number;

/// The deepest nesting accepted (serde_json's own limit is 128).
pub(crate) const MAX_DEPTH: usize = 100;

/// What one character did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// The value goes on.
    More,
    /// The character ended the value and belongs to it.
    Done,
    /// The value (a bare number) ended just before the character, which is not consumed.
    DoneBefore,
}

/// The character cannot continue a valid value (the scanner is then dead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Invalid;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frame {
    Object,
    Array,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NumPart {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    Exp,
    ExpSign,
    ExpDigits,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Escape {
    None,
    Backslash,
    /// `\u` and `n` hex digits so far (`v`), after a high surrogate `high` if any.
    Hex {
        n: u8,
        v: u32,
        high: Option<u32>,
    },
    /// After a high surrogate: a `\` must follow.
    LowBackslash(u32),
    /// After a high surrogate and `\`: a `u` must follow.
    LowU(u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// A value must start (`]` also allowed when `close` is set: just after `[`).
    Value {
        close: bool,
    },
    /// A key must start (`}` also allowed when `close` is set: just after `{`).
    Key {
        close: bool,
    },
    Colon,
    /// After a value inside a container: `,` or the closing bracket.
    After,
    Str {
        key: bool,
        esc: Escape,
    },
    Num {
        part: NumPart,
        text: String,
    },
    Lit {
        word: &'static str,
        at: usize,
    },
    Done,
}

/// The scanner of one JSON value.
#[derive(Clone, Debug)]
pub(crate) struct Scanner {
    stack: Vec<Frame>,
    state: State,
}

impl Scanner {
    /// A scanner waiting for a value (leading whitespace is skipped).
    pub(crate) fn new() -> Scanner {
        Scanner {
            stack: Vec::new(),
            state: State::Value { close: false },
        }
    }

    /// Feeds one character, appending canonical output to `out`.
    pub(crate) fn push(&mut self, c: char, out: &mut String) -> Result<Status, Invalid> {
        let state = std::mem::replace(&mut self.state, State::Done);
        match state {
            State::Value { close } => {
                if ws(c) {
                    self.state = State::Value { close };
                    Ok(Status::More)
                } else if c == ']' && close {
                    self.close(Frame::Array, out)
                } else {
                    self.start_value(c, out)
                }
            }
            State::Key { close } => match c {
                _ if ws(c) => {
                    self.state = State::Key { close };
                    Ok(Status::More)
                }
                '}' if close => self.close(Frame::Object, out),
                '"' => {
                    out.push('"');
                    self.state = State::Str {
                        key: true,
                        esc: Escape::None,
                    };
                    Ok(Status::More)
                }
                _ => Err(Invalid),
            },
            State::Colon => match c {
                _ if ws(c) => {
                    self.state = State::Colon;
                    Ok(Status::More)
                }
                ':' => {
                    out.push(':');
                    self.state = State::Value { close: false };
                    Ok(Status::More)
                }
                _ => Err(Invalid),
            },
            State::After => self.after(c, out),
            State::Str { key, esc } => self.string(key, esc, c, out),
            State::Num { part, text } => self.number(part, text, c, out),
            State::Lit { word, at } => {
                if word[at..].starts_with(c) {
                    let at = at + c.len_utf8();
                    if at == word.len() {
                        out.push_str(word);
                        Ok(self.value_done())
                    } else {
                        self.state = State::Lit { word, at };
                        Ok(Status::More)
                    }
                } else {
                    Err(Invalid)
                }
            }
            State::Done => Err(Invalid),
        }
    }

    fn start_value(&mut self, c: char, out: &mut String) -> Result<Status, Invalid> {
        match c {
            '{' | '[' => {
                if self.stack.len() >= MAX_DEPTH {
                    return Err(Invalid);
                }
                out.push(c);
                if c == '{' {
                    self.stack.push(Frame::Object);
                    self.state = State::Key { close: true };
                } else {
                    self.stack.push(Frame::Array);
                    self.state = State::Value { close: true };
                }
            }
            '"' => {
                out.push('"');
                self.state = State::Str {
                    key: false,
                    esc: Escape::None,
                };
            }
            '-' | '0'..='9' => {
                let part = match c {
                    '-' => NumPart::Minus,
                    '0' => NumPart::Zero,
                    _ => NumPart::Int,
                };
                self.state = State::Num {
                    part,
                    text: c.to_string(),
                };
            }
            't' => {
                self.state = State::Lit {
                    word: "true",
                    at: 1,
                }
            }
            'f' => {
                self.state = State::Lit {
                    word: "false",
                    at: 1,
                }
            }
            'n' => {
                self.state = State::Lit {
                    word: "null",
                    at: 1,
                }
            }
            _ => return Err(Invalid),
        }
        Ok(Status::More)
    }

    fn after(&mut self, c: char, out: &mut String) -> Result<Status, Invalid> {
        let top = *self.stack.last().ok_or(Invalid)?;
        match c {
            _ if ws(c) => {
                self.state = State::After;
                Ok(Status::More)
            }
            ',' => {
                out.push(',');
                self.state = match top {
                    Frame::Object => State::Key { close: false },
                    Frame::Array => State::Value { close: false },
                };
                Ok(Status::More)
            }
            '}' if top == Frame::Object => self.close(top, out),
            ']' if top == Frame::Array => self.close(top, out),
            _ => Err(Invalid),
        }
    }

    fn close(&mut self, frame: Frame, out: &mut String) -> Result<Status, Invalid> {
        debug_assert_eq!(self.stack.last(), Some(&frame));
        self.stack.pop();
        out.push(if frame == Frame::Object { '}' } else { ']' });
        Ok(self.value_done())
    }

    fn value_done(&mut self) -> Status {
        if self.stack.is_empty() {
            self.state = State::Done;
            Status::Done
        } else {
            self.state = State::After;
            Status::More
        }
    }

    fn string(
        &mut self,
        key: bool,
        esc: Escape,
        c: char,
        out: &mut String,
    ) -> Result<Status, Invalid> {
        let esc = match esc {
            Escape::None => match c {
                '"' => {
                    out.push('"');
                    if key {
                        self.state = State::Colon;
                        return Ok(Status::More);
                    }
                    return Ok(self.value_done());
                }
                '\\' => Escape::Backslash,
                '\u{0}'..='\u{1f}' => return Err(Invalid),
                _ => {
                    escape_char(c, out);
                    Escape::None
                }
            },
            Escape::Backslash => {
                let decoded = match c {
                    '"' => '"',
                    '\\' => '\\',
                    '/' => '/',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    'u' => {
                        self.state = State::Str {
                            key,
                            esc: Escape::Hex {
                                n: 0,
                                v: 0,
                                high: None,
                            },
                        };
                        return Ok(Status::More);
                    }
                    _ => return Err(Invalid),
                };
                escape_char(decoded, out);
                Escape::None
            }
            Escape::Hex { n, v, high } => {
                let v = v * 16 + c.to_digit(16).ok_or(Invalid)?;
                if n < 3 {
                    Escape::Hex { n: n + 1, v, high }
                } else {
                    match (high, v) {
                        (None, 0xD800..=0xDBFF) => Escape::LowBackslash(v),
                        (None, 0xDC00..=0xDFFF) => return Err(Invalid),
                        (None, _) => {
                            escape_char(char::from_u32(v).ok_or(Invalid)?, out);
                            Escape::None
                        }
                        (Some(h), 0xDC00..=0xDFFF) => {
                            let cp = 0x10000 + ((h - 0xD800) << 10) + (v - 0xDC00);
                            escape_char(char::from_u32(cp).ok_or(Invalid)?, out);
                            Escape::None
                        }
                        (Some(_), _) => return Err(Invalid),
                    }
                }
            }
            Escape::LowBackslash(h) if c == '\\' => Escape::LowU(h),
            Escape::LowU(h) if c == 'u' => Escape::Hex {
                n: 0,
                v: 0,
                high: Some(h),
            },
            Escape::LowBackslash(_) | Escape::LowU(_) => return Err(Invalid),
        };
        self.state = State::Str { key, esc };
        Ok(Status::More)
    }

    fn number(
        &mut self,
        part: NumPart,
        mut text: String,
        c: char,
        out: &mut String,
    ) -> Result<Status, Invalid> {
        use NumPart::*;
        let next = match (part, c) {
            (Minus, '0') => Some(Zero),
            (Minus, '1'..='9') => Some(Int),
            (Int, '0'..='9') => Some(Int),
            (Zero | Int, '.') => Some(Dot),
            (Dot | Frac, '0'..='9') => Some(Frac),
            (Zero | Int | Frac, 'e' | 'E') => Some(Exp),
            (Exp, '+' | '-') => Some(ExpSign),
            (Exp | ExpSign | ExpDigits, '0'..='9') => Some(ExpDigits),
            _ => None,
        };
        if let Some(part) = next {
            text.push(c);
            self.state = State::Num { part, text };
            return Ok(Status::More);
        }
        if !matches!(part, Zero | Int | Frac | ExpDigits) {
            return Err(Invalid);
        }
        // serde_json decides the number's value and spelling, so the canonical text is
        // exactly what it would print (and out-of-range numbers fail as they do there).
        let n: Number = serde_json::from_str(&text).map_err(|_| Invalid)?;
        out.push_str(&n.to_string());
        match self.value_done() {
            Status::Done => Ok(Status::DoneBefore),
            _ => self.push(c, out),
        }
    }
}

/// JSON's insignificant whitespace.
fn ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// Writes one string character as serde_json does.
fn escape_char(c: char, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{0}'..='\u{1f}' => {
            let b = c as u8;
            out.push_str("\\u00");
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        }
        _ => out.push(c),
    }
}

/// The canonical compact form of one complete JSON value, or `None` if `text` is not
/// exactly one valid value (surrounding whitespace allowed).
#[cfg(test)]
pub(crate) fn canonical(text: &str) -> Option<String> {
    let mut s = Scanner::new();
    let mut out = String::new();
    let mut done = false;
    for c in text.chars() {
        if done {
            if ws(c) {
                continue;
            }
            return None;
        }
        match s.push(c, &mut out).ok()? {
            Status::More => {}
            Status::Done => done = true,
            Status::DoneBefore => {
                done = true;
                if !ws(c) {
                    return None;
                }
            }
        }
    }
    if !done {
        // A bare number ends at the end of the text.
        s.push(' ', &mut out).ok()?;
        if s.state != State::Done {
            return None;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// serde_json's verdict and compact text.
    fn reference(text: &str) -> Option<String> {
        let v: Value = serde_json::from_str(text).ok()?;
        Some(serde_json::to_string(&v).unwrap())
    }

    #[test]
    fn canonical_form_matches_serde_json() {
        let cases = [
            r#"{}"#,
            r#" { "a" : 1 , "b" : [ 1 , 2.50 , -0 , -0.0, 1e5, 1E+2, 2.5e-3, 12345678901234567890, 123456789012345678901234567890, -9223372036854775808 ] } "#,
            r#"{"z": 1, "a": 2, "m": {"y": null, "b": true, "c": false}}"#,
            r#"{"s": "tab\tnew\nline \"q\" back\\ slash\/ \u00e9 \u0041 \ud83d\ude00 \u001f \b\f\r"}"#,
            r#"{"s": "é 😀 \u007f ", "empty": "", "arr": [[], {}, [[]], [{"x": []}]]}"#,
            r#"[1, "two", null]"#,
            r#""just a string""#,
            "42",
            "-1.5e10",
            "true",
            r#"{"code": "fn main() {\n    println!(\"hi\");\n}\n"}"#,
        ];
        for c in cases {
            assert_eq!(canonical(c), reference(c), "{c}");
            assert!(canonical(c).is_some(), "{c}");
        }
    }

    #[test]
    fn invalid_json_is_rejected_like_serde_json() {
        let cases = [
            "{",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "[1,]",
            "[,1]",
            "{,}",
            "01",
            "-",
            "1.",
            "1e",
            "1e+",
            ".5",
            "+1",
            "tru",
            "nul",
            "True",
            "\"a",
            "\"raw\ncontrol\"",
            "\"bad \\x escape\"",
            "\"\\u12\"",
            "\"\\ud800\"",
            "\"\\ud800\\u0041\"",
            "\"\\udc00\"",
            "{\"a\" 1}",
            "{a: 1}",
            "{'a': 1}",
            "[1 2]",
            "1e400",
            "{} {}",
            "NaN",
        ];
        for c in cases {
            assert_eq!(canonical(c), None, "{c:?}");
            assert_eq!(reference(c), None, "serde_json accepts {c:?}");
        }
    }

    #[test]
    fn every_character_is_escaped_as_serde_json_escapes_it() {
        for cp in 0..=0x10FFFFu32 {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            let mut out = String::new();
            escape_char(c, &mut out);
            let want = serde_json::to_string(&c.to_string()).unwrap();
            assert_eq!(format!("\"{out}\""), want, "U+{cp:04X}");
        }
    }

    #[test]
    fn nesting_is_limited() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(canonical(&deep(MAX_DEPTH)).is_some());
        assert!(canonical(&deep(MAX_DEPTH + 1)).is_none());
    }

    #[test]
    fn output_grows_as_input_arrives() {
        let text = r#"{"a": "xyz", "b": [1, 22]}"#;
        let mut s = Scanner::new();
        let mut out = String::new();
        let mut lens = Vec::new();
        for c in text.chars() {
            s.push(c, &mut out).unwrap();
            lens.push(out.len());
        }
        assert_eq!(out, r#"{"a":"xyz","b":[1,22]}"#);
        // The string's characters appear one by one, before it closes.
        let at_y = text.find('y').unwrap();
        assert_eq!(&out[..lens[at_y]], r#"{"a":"xy"#);
        // A number appears when it ends.
        let at_22 = text.find("22").unwrap() + 1;
        assert_eq!(&out[..lens[at_22]], r#"{"a":"xyz","b":[1,"#);
    }
}
