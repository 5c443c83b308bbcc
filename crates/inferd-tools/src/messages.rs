//! The tool-related fields of a request's `messages`.

use serde_json::{Map, Value};

use crate::error::ToolError;

/// Checks the tool-related parts of `messages`, as the client sent them (before the
/// server rewrites them for the chat template):
///
/// - a `role: "tool"` message has a non-empty string `tool_call_id` and a `content`
///   that is a string or an array of text parts;
/// - an assistant message's `tool_calls`, where present and not null, is a non-empty
///   array of `{"id": string, "type": "function", "function": {"name": string,
///   "arguments": string}}` (`arguments` is the JSON text as the model wrote it; it is
///   not required to parse).
///
/// Everything else (roles, other contents) is the server's own check; elements that are
/// not objects or have no string role are skipped here. Whether each `tool_call_id`
/// answers an earlier call is not checked: with an inferd context the calling turn may
/// sit in the context, outside this list.
pub fn check_messages(messages: &Value) -> Result<(), ToolError> {
    let Some(list) = messages.as_array() else {
        return Err(ToolError::new(
            "messages",
            "`messages` must be an array of message objects",
        ));
    };
    for (i, m) in list.iter().enumerate() {
        let Some(obj) = m.as_object() else { continue };
        let at = format!("messages[{i}]");
        match obj.get("role").and_then(Value::as_str) {
            Some("tool") => check_tool_message(obj, &at)?,
            Some("assistant") => check_tool_calls(obj, &at)?,
            _ => {}
        }
    }
    Ok(())
}

fn check_tool_message(obj: &Map<String, Value>, at: &str) -> Result<(), ToolError> {
    match obj.get("tool_call_id") {
        Some(Value::String(s)) if !s.is_empty() => {}
        None | Some(Value::Null) => {
            return Err(ToolError::new(
                format!("{at}.tool_call_id"),
                format!("`{at}.tool_call_id` is required in a `tool` message"),
            ))
        }
        Some(_) => {
            return Err(ToolError::new(
                format!("{at}.tool_call_id"),
                format!("`{at}.tool_call_id` must be a non-empty string"),
            ))
        }
    }
    let text_part = |p: &Value| {
        p.get("type").and_then(Value::as_str) == Some("text")
            && p.get("text").is_some_and(Value::is_string)
    };
    match obj.get("content") {
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(parts)) if parts.iter().all(text_part) => Ok(()),
        _ => Err(ToolError::new(
            format!("{at}.content"),
            format!("`{at}.content` of a `tool` message must be a string (the tool's result)"),
        )),
    }
}

fn check_tool_calls(obj: &Map<String, Value>, at: &str) -> Result<(), ToolError> {
    let calls = match obj.get("tool_calls") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(_) => {
            return Err(ToolError::new(
                format!("{at}.tool_calls"),
                format!("`{at}.tool_calls` must be a non-empty array of tool calls"),
            ))
        }
    };
    for (j, call) in calls.iter().enumerate() {
        let at = format!("{at}.tool_calls[{j}]");
        let Some(call) = call.as_object() else {
            return Err(ToolError::new(
                at.clone(),
                format!("`{at}` must be an object"),
            ));
        };
        string_field(call, "id", &at)?;
        match call.get("type") {
            Some(Value::String(s)) if s == "function" => {}
            _ => {
                return Err(ToolError::new(
                    format!("{at}.type"),
                    format!("`{at}.type` must be \"function\""),
                ))
            }
        }
        let at = format!("{at}.function");
        let Some(f) = call.get("function").and_then(Value::as_object) else {
            return Err(ToolError::new(
                at.clone(),
                format!("`{at}` must be an object with `name` and `arguments`"),
            ));
        };
        string_field(f, "name", &at)?;
        match f.get("arguments") {
            Some(Value::String(_)) => {}
            _ => {
                return Err(ToolError::new(
                    format!("{at}.arguments"),
                    format!("`{at}.arguments` must be a string (the arguments as JSON text)"),
                ))
            }
        }
    }
    Ok(())
}

fn string_field(obj: &Map<String, Value>, key: &str, at: &str) -> Result<(), ToolError> {
    match obj.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(()),
        _ => Err(ToolError::new(
            format!("{at}.{key}"),
            format!("`{at}.{key}` must be a non-empty string"),
        )),
    }
}
