//! The `tojson` filter of transformers' chat templates: Python's
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
//! Keys keep their order, non-ASCII stays as is, separators are `", "`/`": "` without indent
//! and `","`/`": "` with it, floats print as Python's `repr`.

use std::fmt::Write;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

use super::pyfloat::py_float_repr;

/// Options of `json.dumps` that templates use.
#[derive(Clone, Debug)]
pub struct JsonStyle {
    pub ensure_ascii: bool,
    /// Indent unit; `None` writes everything on one line.
    pub indent: Option<String>,
    pub item_sep: String,
    pub key_sep: String,
    pub sort_keys: bool,
}

impl Default for JsonStyle {
    fn default() -> Self {
        JsonStyle {
            ensure_ascii: false,
            indent: None,
            item_sep: ", ".into(),
            key_sep: ": ".into(),
            sort_keys: false,
        }
    }
}

/// The filter: `x | tojson`, `x | tojson(indent=2)`, `tojson(x, ensure_ascii=True)` ...
/// Positional arguments follow Python's order: ensure_ascii, indent, separators, sort_keys.
pub fn tojson_filter(
    value: Value,
    ensure_ascii: Option<Value>,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let ensure_ascii = kwargs
        .get::<Option<Value>>("ensure_ascii")?
        .or(ensure_ascii);
    let indent = kwargs.get::<Option<Value>>("indent")?.or(indent);
    let separators: Option<Value> = kwargs.get("separators")?;
    let sort_keys: Option<Value> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;

    let mut style = JsonStyle {
        ensure_ascii: ensure_ascii.is_some_and(|v| v.is_true()),
        sort_keys: sort_keys.is_some_and(|v| v.is_true()),
        ..JsonStyle::default()
    };
    if let Some(indent) = indent.filter(|v| !v.is_none() && !v.is_undefined()) {
        style.indent = Some(match indent.kind() {
            ValueKind::Number => " ".repeat(i64::try_from(indent)?.max(0) as usize),
            _ => indent.as_str().unwrap_or_default().to_string(),
        });
        style.item_sep = ",".into();
    }
    if let Some(seps) = separators.filter(|v| !v.is_none() && !v.is_undefined()) {
        let item = seps.get_item_by_index(0)?;
        let key = seps.get_item_by_index(1)?;
        match (item.as_str(), key.as_str()) {
            (Some(i), Some(k)) => {
                style.item_sep = i.into();
                style.key_sep = k.into();
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: separators must be a pair of strings",
                ))
            }
        }
    }
    let mut out = String::new();
    write_json(&mut out, &value, &style, 0)?;
    Ok(Value::from_safe_string(out))
}

/// Serializes `value` into `out` in the given style.
pub fn write_json(
    out: &mut String,
    value: &Value,
    style: &JsonStyle,
    depth: usize,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Undefined => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: an undefined value is not JSON serializable",
            ))
        }
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, value)?,
        ValueKind::String => {
            write_string(out, value.as_str().unwrap_or_default(), style.ensure_ascii)
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, style, depth, ('[', ']'), &items, |out, item, d| {
                write_json(out, item, style, d)
            })?;
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if style.sort_keys {
                keys.sort();
            }
            let pairs = keys
                .into_iter()
                .map(|k| {
                    let v = value.get_item(&k)?;
                    Ok((k, v))
                })
                .collect::<Result<Vec<_>, Error>>()?;
            write_container(out, style, depth, ('{', '}'), &pairs, |out, (k, v), d| {
                write_key(out, k, style)?;
                out.push_str(&style.key_sep);
                write_json(out, v, style, d)
            })?;
        }
        other => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a value of kind {other:?} is not JSON serializable"),
            ))
        }
    }
    Ok(())
}

/// Writes `[a, b]` / `{..}` with Python's indentation rules (empty containers stay `[]`/`{}`).
fn write_container<T>(
    out: &mut String,
    style: &JsonStyle,
    depth: usize,
    (open, close): (char, char),
    items: &[T],
    mut write_item: impl FnMut(&mut String, &T, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&style.item_sep);
        }
        if let Some(unit) = &style.indent {
            out.push('\n');
            out.push_str(&unit.repeat(depth + 1));
        }
        write_item(out, item, depth + 1)?;
    }
    if let Some(unit) = &style.indent {
        out.push('\n');
        out.push_str(&unit.repeat(depth));
    }
    out.push(close);
    Ok(())
}

/// Object keys: strings as is; numbers, bools and null converted as Python does.
fn write_key(out: &mut String, key: &Value, style: &JsonStyle) -> Result<(), Error> {
    let text = match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_string(),
        ValueKind::None => "null".into(),
        ValueKind::Bool => if key.is_true() { "true" } else { "false" }.into(),
        ValueKind::Number => {
            let mut s = String::new();
            write_number(&mut s, key)?;
            s
        }
        other => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: keys must be str, int, float, bool or None, not {other:?}"),
            ))
        }
    };
    write_string(out, &text, style.ensure_ascii);
    Ok(())
}

fn write_number(out: &mut String, value: &Value) -> Result<(), Error> {
    if value.is_integer() {
        write!(out, "{value}").ok();
    } else {
        out.push_str(&py_float_repr(f64::try_from(value.clone())?));
    }
    Ok(())
}

/// A JSON string literal with Python's escapes (`\n`, `\uXXXX` in lowercase hex, ...).
pub fn write_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                write!(out, "\\u{:04x}", c as u32).ok();
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    write!(out, "\\u{:04x}", unit).ok();
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dumps(json: &str, style: &JsonStyle) -> String {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let mut out = String::new();
        write_json(&mut out, &Value::from_serialize(&v), style, 0).unwrap();
        out
    }

    #[test]
    fn default_style_matches_python() {
        // Expected: python3 -c 'import json; print(json.dumps(x, ensure_ascii=False))'
        let got = dumps(
            r#"{"z": 1, "a": [1.5, -2, true, null, "é\n\"q\"\u0001"], "e": {}, "l": [], "f": 1e-05}"#,
            &JsonStyle::default(),
        );
        assert_eq!(
            got,
            "{\"z\": 1, \"a\": [1.5, -2, true, null, \"é\\n\\\"q\\\"\\u0001\"], \"e\": {}, \"l\": [], \"f\": 1e-05}"
        );
    }

    #[test]
    fn indent_and_ascii_match_python() {
        // Expected: json.dumps({"k": [1, {"x": "ü😀"}], "e": []}, indent=2, ensure_ascii=True)
        let style = JsonStyle {
            ensure_ascii: true,
            indent: Some("  ".into()),
            item_sep: ",".into(),
            ..JsonStyle::default()
        };
        let got = dumps(r#"{"k": [1, {"x": "ü😀"}], "e": []}"#, &style);
        assert_eq!(
            got,
            "{\n  \"k\": [\n    1,\n    {\n      \"x\": \"\\u00fc\\ud83d\\ude00\"\n    }\n  ],\n  \"e\": []\n}"
        );
    }

    #[test]
    fn sort_keys() {
        let style = JsonStyle {
            sort_keys: true,
            ..JsonStyle::default()
        };
        assert_eq!(dumps(r#"{"b": 1, "a": 2}"#, &style), r#"{"a": 2, "b": 1}"#);
    }
}
