//! The minijinja environment that mirrors transformers' Jinja2 sandbox for chat templates:
//! `trim_blocks` + `lstrip_blocks`, loop controls, Python string/dict/list methods (pycompat),
//! Python-style printing, and the globals/filters transformers adds (`tojson`,
//! `raise_exception`, `strftime_now`).

use minijinja::{Environment, Error, ErrorKind, Value};

use super::pyrepr::py_str;
use super::strftime::CivilTime;
use super::tojson::tojson_filter;

/// A fresh environment with the transformers chat-template semantics.
pub fn chat_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(|out, state, value| match py_str(value) {
        Some(text) => out
            .write_str(&text)
            .map_err(|_| Error::new(ErrorKind::WriteFailure, "cannot write template output")),
        None => minijinja::escape_formatter(out, state, value),
    });
    env.add_filter("tojson", tojson_filter);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env
}

/// `raise_exception(message)`: aborts rendering with the template's own message.
fn raise_exception(message: Value) -> Result<Value, Error> {
    let text = match message.as_str() {
        Some(s) => s.to_string(),
        None => message.to_string(),
    };
    Err(Error::new(ErrorKind::InvalidOperation, text))
}

/// `strftime_now(format)`: the current UTC time.
fn strftime_now(format: String) -> String {
    CivilTime::now().format(&format)
}
