//! Python's `str()` of template values, so `{{ value }}` prints what Jinja2 prints:
//! `True`/`False`/`None`, floats as `repr`, lists and dicts as `['a', 1]` / `{'k': None}`.

use std::fmt::Write;

use minijinja::value::ValueKind;
use minijinja::Value;

use super::pyfloat::py_float_repr;

/// `str(value)` for the kinds whose Python spelling differs from minijinja's; `None` otherwise.
pub fn py_str(value: &Value) -> Option<String> {
    match value.kind() {
        ValueKind::Bool | ValueKind::None | ValueKind::Seq | ValueKind::Map => Some(py_repr(value)),
        ValueKind::Number if !value.is_integer() => Some(py_repr(value)),
        _ => None,
    }
}

/// `repr(value)`.
pub fn py_repr(value: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, value);
    out
}

fn write_repr(out: &mut String, value: &Value) {
    match value.kind() {
        ValueKind::None => out.push_str("None"),
        ValueKind::Undefined => {}
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number if value.is_integer() => {
            write!(out, "{value}").ok();
        }
        ValueKind::Number => {
            let x = f64::try_from(value.clone()).unwrap_or(f64::NAN);
            out.push_str(&match x {
                x if x.is_nan() => "nan".to_string(),
                x if x.is_infinite() => if x > 0.0 { "inf" } else { "-inf" }.to_string(),
                x => py_float_repr(x),
            });
        }
        ValueKind::String => write_str_repr(out, value.as_str().unwrap_or_default()),
        ValueKind::Seq => {
            out.push('[');
            for (i, item) in value.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &item);
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &key);
                out.push_str(": ");
                write_repr(out, &value.get_item(&key).unwrap_or_default());
            }
            out.push('}');
        }
        _ => {
            write!(out, "{value}").ok();
        }
    }
}

/// Python string repr: single quotes unless the text has `'` and no `"`.
fn write_str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                write!(out, "\\x{:02x}", c as u32).ok();
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_spellings() {
        // Expected strings are Python 3 `str()` outputs.
        let v: serde_json::Value =
            serde_json::from_str(r#"{"a": [1, 2.5, true, null, "it's", "q\"x", "t\n"], "b": {}}"#)
                .unwrap();
        let v = Value::from_serialize(&v);
        assert_eq!(
            py_str(&v).unwrap(),
            r#"{'a': [1, 2.5, True, None, "it's", 'q"x', 't\n'], 'b': {}}"#
        );
        assert_eq!(py_str(&Value::from(false)).unwrap(), "False");
        assert_eq!(py_str(&Value::from(())).unwrap(), "None");
        assert_eq!(py_str(&Value::from(1e-5)).unwrap(), "1e-05");
        assert_eq!(py_str(&Value::from(7)), None);
        assert_eq!(py_str(&Value::from("x")), None);
    }
}
