//! JSON trees in request bodies, bounded. Fields an endpoint keeps as a `serde_json::Value`
//! (messages, tools, a Responses `input`, ...) cost many times their text: an array of
//! small numbers about 30 times, so a 4 MiB body could hold hundreds of MiB while it is
//! read. Read through [`bounded`] (and its `Option` / map forms), those trees together hold
//! at most [`MAX_VALUES`] JSON values a read of a body ([`extract::parse`] sets the budget);
//! past it the read is a 400 naming the field. Outside such a read (a record read back
//! from disk) nothing is counted.
//!
//! [`extract::parse`]: crate::extract::parse

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// JSON values (each scalar, array and object counts one) the trees of one read of a
/// request body may hold together: far past any real chat (a message is a handful), and
/// at most about 8 MiB of tree.
pub const MAX_VALUES: usize = 131_072;

thread_local! {
    /// Values the trees of the current read may still hold (`None`: no read counts).
    static LEFT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Runs `f` (one read of a body, on this thread) with a budget of [`MAX_VALUES`]; the
/// budget before it is back afterwards, even if `f` panics.
pub fn with_budget<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LEFT.with(|l| l.set(self.0));
        }
    }
    let _restore = Restore(LEFT.with(|l| l.replace(Some(MAX_VALUES))));
    f()
}

/// How the error of a spent budget begins.
pub const SPENT: &str = "the request's JSON trees";

/// Takes one value from the budget; an error once it is spent.
fn take<E: de::Error>() -> Result<(), E> {
    LEFT.with(|l| match l.get() {
        None => Ok(()),
        Some(0) => Err(E::custom(format!(
            "{SPENT} (messages, tools, input and the like) hold more than {MAX_VALUES} \
             values together"
        ))),
        Some(n) => {
            l.set(Some(n - 1));
            Ok(())
        }
    })
}

/// `text` read as a JSON value within the current budget; `None` if it is not one JSON
/// value or the budget is spent.
pub fn parse_within(text: &str) -> Option<Value> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = bounded(&mut de).ok()?;
    de.end().ok()?;
    Some(v)
}

/// A `Value` read within the budget.
pub fn bounded<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    d.deserialize_any(TreeVisitor)
}

/// An optional `Value` read within the budget (with `#[serde(default)]`).
pub fn bounded_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    match bounded(d)? {
        Value::Null => Ok(None),
        v => Ok(Some(v)),
    }
}

/// An optional JSON object read within the budget (with `#[serde(default)]`).
pub fn bounded_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Map<String, Value>>, D::Error> {
    // serde_json's own conversion says what is wrong with anything but an object.
    serde_json::from_value(bounded(d)?).map_err(de::Error::custom)
}

struct TreeVisitor;

impl<'de> DeserializeSeed<'de> for TreeVisitor {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TreeVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        take()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        take()?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        take()?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        take()?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        take()?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        take()?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        take()?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        bounded(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        take()?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(TreeVisitor)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        take()?;
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value_seed(TreeVisitor)?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    struct Body {
        #[serde(default, deserialize_with = "bounded_opt")]
        messages: Option<Value>,
        #[serde(default, deserialize_with = "bounded_map")]
        kwargs: Option<Map<String, Value>>,
    }

    fn read(json: &str) -> Result<Body, serde_json::Error> {
        with_budget(|| serde_json::from_str(json))
    }

    #[test]
    fn trees_read_as_a_value_reads_them() {
        let json = r#"{"messages": [{"role": "user", "content": "hi", "n": [1, -2, 2.5e3, null, true]}],
                       "kwargs": {"enable_thinking": false}}"#;
        let b = read(json).unwrap();
        let want: Value = serde_json::from_str(json).unwrap();
        assert_eq!(b.messages.as_ref(), want.get("messages"));
        assert_eq!(b.kwargs.unwrap(), *want["kwargs"].as_object().unwrap());
        let none = read(r#"{"messages": null}"#).unwrap();
        assert!(none.messages.is_none() && none.kwargs.is_none());
        assert!(read(r#"{"kwargs": [1]}"#).is_err());
    }

    #[test]
    fn a_panic_inside_a_read_leaves_no_budget_behind() {
        let r = std::panic::catch_unwind(|| with_budget(|| panic!("in a read")));
        assert!(r.is_err());
        assert_eq!(LEFT.with(|l| l.get()), None);
    }

    #[test]
    fn the_budget_is_shared_by_a_reads_trees() {
        // Two trees of MAX_VALUES values together (an array or object counts one), then
        // one value more.
        let half = |n: usize| format!("[{}]", vec!["0"; n].join(","));
        let fits = format!(
            r#"{{"messages": {}, "kwargs": {{"a": {}}}}}"#,
            half(MAX_VALUES / 2 - 1),
            half(MAX_VALUES / 2 - 2)
        );
        assert!(read(&fits).is_ok());
        let past = fits.replacen("[0,", "[0,0,", 1);
        let e = read(&past).unwrap_err().to_string();
        assert!(e.contains("more than 131072 values"), "{e}");
        // The next read has its own budget; outside a read nothing counts.
        assert!(read(&fits).is_ok());
        assert!(serde_json::from_str::<Body>(&past).is_ok());
    }
}
