//! A Messages API body -> the chat request the pipeline runs: `system` becomes the first
//! message, content blocks become chat messages (`tool_use` -> an assistant's
//! `tool_calls`, `tool_result` -> a `tool` message), `tools` / `tool_choice` become
//! function tools, `thinking` the template's reasoning switch, `output_config` the reply's
//! format and effort. A final assistant message is a prefill: the reply continues it.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::openai::types::{ChatParams, CommonParams, Effort, InferdExt, Stop};
use crate::pipeline::ChatRequest;

/// The fields of `POST /v1/messages` (and `/v1/messages/count_tokens`).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct MessagesBody {
    pub model: Option<String>,
    /// Required on `/v1/messages` (as Anthropic requires it).
    pub max_tokens: Option<u64>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub messages: Option<Value>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub system: Option<Value>,
    pub stop_sequences: Option<crate::strings::Strings<{ crate::params::MAX_STOP }>>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub stream: Option<bool>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub tools: Option<Value>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub tool_choice: Option<Value>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub thinking: Option<Value>,
    /// `{"format": {"type": "json_schema", "schema": ...}, "effort": ...}`.
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub output_config: Option<Value>,
    /// The structured-outputs beta's spelling of `output_config.format`.
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub output_format: Option<Value>,
    /// `{"user_id": ...}`: accepted, not used.
    #[serde(default, deserialize_with = "crate::tree::bounded_map")]
    pub metadata: Option<Map<String, Value>>,
    pub inferd: Option<InferdExt>,
}

fn bad(param: &str, msg: impl Into<String>) -> ApiError {
    ApiError::invalid_param(param, msg)
}

/// The text of a `system` value: a string or a list of text blocks.
fn system_text(v: &Value) -> Result<Option<String>, ApiError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Array(blocks) => {
            let mut texts = Vec::with_capacity(blocks.len());
            for (i, b) in blocks.iter().enumerate() {
                texts.push(text_block(b, &format!("system[{i}]"))?);
            }
            Ok(Some(texts.join("\n")))
        }
        _ => Err(bad(
            "system",
            "`system` must be a string or an array of text blocks",
        )),
    }
}

/// A `{"type": "text", "text": ...}` block's text.
fn text_block(b: &Value, at: &str) -> Result<String, ApiError> {
    match (
        b.get("type").and_then(Value::as_str),
        b.get("text").and_then(Value::as_str),
    ) {
        (Some("text"), Some(t)) => Ok(t.to_string()),
        _ => Err(bad(
            at,
            format!("`{at}` must be a text block ({{\"type\": \"text\", \"text\": ...}})"),
        )),
    }
}

/// Blocks the server cannot read yet.
fn unsupported(kind: &str, at: &str) -> ApiError {
    bad(
        at,
        format!("`{at}`: `{kind}` content blocks are not supported by this server (text only)"),
    )
}

/// A `tool_result`'s content: a string or text blocks.
fn tool_result_text(b: &Value, at: &str) -> Result<String, ApiError> {
    let text = match b.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (k, p) in parts.iter().enumerate() {
                let pat = format!("{at}.content[{k}]");
                match p.get("type").and_then(Value::as_str) {
                    Some("text") => texts.push(text_block(p, &pat)?),
                    Some(kind) => return Err(unsupported(kind, &pat)),
                    None => return Err(bad(&pat, format!("`{pat}` must be a text block"))),
                }
            }
            texts.join("\n")
        }
        Some(_) => {
            return Err(bad(
                &format!("{at}.content"),
                format!("`{at}.content` must be a string or an array of text blocks"),
            ))
        }
    };
    let is_error = match b.get("is_error") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(e)) => *e,
        Some(_) => {
            return Err(bad(
                &format!("{at}.is_error"),
                format!("`{at}.is_error` must be a boolean"),
            ))
        }
    };
    Ok(if is_error {
        format!("Error: {text}")
    } else {
        text
    })
}

/// One Anthropic message -> chat messages (a user turn with tool results becomes the
/// `tool` messages first, then its text). Only the final message, if the assistant's
/// (a prefill), may be empty.
fn convert_message(i: usize, m: &Value, last: bool, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let at = format!("messages[{i}]");
    let Some(obj) = m.as_object() else {
        return Err(bad(&at, format!("`{at}` must be an object")));
    };
    let role = match obj.get("role").and_then(Value::as_str) {
        Some(r @ ("user" | "assistant")) => r,
        _ => {
            return Err(bad(
                &format!("{at}.role"),
                format!("`{at}.role` must be `user` or `assistant`"),
            ))
        }
    };
    let empty = match obj.get("content") {
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(b)) => b.is_empty(),
        _ => false,
    };
    if empty && !(last && role == "assistant") {
        return Err(bad(
            &format!("{at}.content"),
            format!(
                "`{at}.content` is empty: every message but a final assistant one needs content"
            ),
        ));
    }
    let blocks = match obj.get("content") {
        Some(Value::String(s)) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Some(Value::Array(b)) => b,
        _ => {
            return Err(bad(
                &format!("{at}.content"),
                format!("`{at}.content` must be a string or an array of content blocks"),
            ))
        }
    };
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let bat = format!("{at}.content[{j}]");
        let kind = b.get("type").and_then(Value::as_str).unwrap_or("");
        match (role, kind) {
            (_, "text") => texts.push(text_block(b, &bat)?),
            ("assistant", "tool_use") => {
                let (Some(id), Some(name)) = (
                    b.get("id").and_then(Value::as_str),
                    b.get("name").and_then(Value::as_str),
                ) else {
                    return Err(bad(
                        &bat,
                        format!("`{bat}`: a tool_use block needs string `id` and `name`"),
                    ));
                };
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                if !input.is_object() {
                    return Err(bad(
                        &format!("{bat}.input"),
                        format!("`{bat}.input` must be an object"),
                    ));
                }
                calls.push(json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()}}));
            }
            ("user", "tool_result") => {
                let Some(id) = b.get("tool_use_id").and_then(Value::as_str) else {
                    return Err(bad(
                        &format!("{bat}.tool_use_id"),
                        format!("`{bat}.tool_use_id` must be a string"),
                    ));
                };
                let content = tool_result_text(b, &bat)?;
                out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            // Earlier reasoning is not shown to the model again.
            ("assistant", "thinking" | "redacted_thinking") => {}
            (_, "") => return Err(bad(&bat, format!("`{bat}` must have a `type`"))),
            (_, kind) => return Err(unsupported(kind, &bat)),
        }
    }
    if role == "assistant" {
        let mut msg = json!({"role": "assistant", "content": texts.join("\n")});
        if !calls.is_empty() {
            msg["tool_calls"] = Value::Array(calls);
        }
        out.push(msg);
    } else if !texts.is_empty() {
        out.push(json!({"role": "user", "content": texts.join("\n")}));
    }
    Ok(())
}

/// `tools` as chat function tools.
fn convert_tools(tools: &Value) -> Result<Value, ApiError> {
    let Some(list) = tools.as_array() else {
        return Err(bad("tools", "`tools` must be an array of tool definitions"));
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        let Some(obj) = t.as_object() else {
            return Err(bad(&at, format!("`{at}` must be an object")));
        };
        match obj.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            Some(other) => {
                return Err(bad(
                    &format!("{at}.type"),
                    format!("`{at}`: server tools (`{other}`) are not supported; give client tools with `input_schema`"),
                ))
            }
        }
        let mut f = Map::new();
        f.insert(
            "name".into(),
            obj.get("name").cloned().unwrap_or(Value::Null),
        );
        if let Some(d) = obj.get("description") {
            f.insert("description".into(), d.clone());
        }
        match obj.get("input_schema") {
            Some(s) => {
                f.insert("parameters".into(), s.clone());
            }
            None => {
                return Err(bad(
                    &format!("{at}.input_schema"),
                    format!("`{at}.input_schema` is required"),
                ))
            }
        }
        if let Some(s) = obj.get("strict") {
            f.insert("strict".into(), s.clone());
        }
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(Value::Array(out))
}

/// `tool_choice` as chat's, and whether parallel calls are disabled.
fn convert_choice(c: &Value) -> Result<(Value, Option<bool>), ApiError> {
    let kind = c.get("type").and_then(Value::as_str);
    let parallel = match c.get("disable_parallel_tool_use") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(d)) => Some(!d),
        Some(_) => {
            return Err(bad(
                "tool_choice.disable_parallel_tool_use",
                "`tool_choice.disable_parallel_tool_use` must be a boolean",
            ))
        }
    };
    let choice = match kind {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => match c.get("name").and_then(Value::as_str) {
            Some(n) => json!({"type": "function", "function": {"name": n}}),
            None => {
                return Err(bad(
                    "tool_choice.name",
                    "`tool_choice.name` is required with `type: \"tool\"`",
                ))
            }
        },
        _ => {
            return Err(bad(
                "tool_choice.type",
                "`tool_choice.type` must be `auto`, `any`, `tool` or `none`",
            ))
        }
    };
    Ok((choice, parallel))
}

/// `thinking` as the template's `enable_thinking`.
fn thinking_switch(t: &Value) -> Result<Option<bool>, ApiError> {
    match t.get("type").and_then(Value::as_str) {
        _ if t.is_null() => Ok(None),
        // The template's switch is on or off: the model decides how much it thinks.
        Some("enabled" | "adaptive" | "between_tools") => Ok(Some(true)),
        Some("disabled") => Ok(Some(false)),
        _ => Err(bad(
            "thinking.type",
            "`thinking.type` must be `enabled`, `adaptive`, `between_tools` or `disabled`",
        )),
    }
}

/// `output_config.format` (or the beta's `output_format`) as chat's `response_format`.
fn output_format(f: &Value, at: &str) -> Result<Option<Value>, ApiError> {
    if f.is_null() {
        return Ok(None);
    }
    if f.get("type").and_then(Value::as_str) != Some("json_schema") {
        return Err(bad(
            &format!("{at}.type"),
            format!("`{at}.type` must be `json_schema`"),
        ));
    }
    let Some(schema) = f.get("schema").filter(|s| s.is_object()) else {
        return Err(bad(
            &format!("{at}.schema"),
            format!("`{at}.schema` must be a JSON Schema object"),
        ));
    };
    Ok(Some(json!({"type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": true}})))
}

/// `output_config.effort` as inferd's effort (the levels past `high` are `high`).
fn output_effort(e: &Value) -> Result<Option<Effort>, ApiError> {
    match e {
        Value::Null => Ok(None),
        Value::String(s) => match s.as_str() {
            "low" => Ok(Some(Effort::Low)),
            "medium" => Ok(Some(Effort::Medium)),
            "high" | "xhigh" | "max" => Ok(Some(Effort::High)),
            _ => Err(bad(
                "output_config.effort",
                "`output_config.effort` must be `low`, `medium`, `high`, `xhigh` or `max`",
            )),
        },
        _ => Err(bad(
            "output_config.effort",
            "`output_config.effort` must be a string",
        )),
    }
}

/// Anthropic's ranges, narrower than chat's: `temperature` in [0, 1], `top_k` ≥ 0.
fn check_ranges(b: &MessagesBody) -> Result<(), ApiError> {
    if b.temperature.is_some_and(|t| !(0.0..=1.0).contains(&t)) {
        return Err(bad("temperature", "`temperature` must be in [0, 1]"));
    }
    if b.top_k.is_some_and(|k| k < 0) {
        return Err(bad("top_k", "`top_k` must be 0 or more"));
    }
    Ok(())
}

/// A final assistant message (a prefill) must not end in whitespace, as Anthropic
/// requires: the reply continues right after its text.
fn check_prefill(list: &[Value]) -> Result<bool, ApiError> {
    let Some(last) = list.last().filter(|m| m["role"] == "assistant") else {
        return Ok(false);
    };
    let i = list.len() - 1;
    let text = match &last["content"] {
        Value::String(s) => s.as_str(),
        Value::Array(blocks) => blocks
            .iter()
            .rev()
            .find(|b| b["type"] == "text")
            .and_then(|b| b["text"].as_str())
            .unwrap_or_default(),
        _ => "",
    };
    if text.ends_with(char::is_whitespace) {
        return Err(bad(
            &format!("messages[{i}].content"),
            "final assistant content cannot end with trailing whitespace",
        ));
    }
    Ok(true)
}

/// The chat request for a Messages body; `count` is true for count_tokens (no
/// `max_tokens` needed).
pub fn to_chat(b: &MessagesBody, count: bool) -> Result<ChatRequest, ApiError> {
    let max_tokens = match b.max_tokens {
        Some(n) => Some(n),
        None if count => None,
        None => return Err(bad("max_tokens", "`max_tokens` is required")),
    };
    check_ranges(b)?;
    let mut messages = Vec::new();
    if let Some(s) = b.system.as_ref().map(system_text).transpose()?.flatten() {
        messages.push(json!({"role": "system", "content": s}));
    }
    let mut prefill = match &b.messages {
        Some(Value::Array(list)) if !list.is_empty() => {
            for (i, m) in list.iter().enumerate() {
                convert_message(i, m, i + 1 == list.len(), &mut messages)?;
            }
            check_prefill(list)?
        }
        Some(Value::Array(_)) => {
            return Err(bad("messages", "`messages` must hold at least one message"))
        }
        None | Some(Value::Null) => return Err(bad("messages", "`messages` is required")),
        Some(_) => return Err(bad("messages", "`messages` must be an array of messages")),
    };
    // An empty prefill is a new turn.
    if prefill
        && messages
            .last()
            .is_some_and(|m| m["content"] == "" && m.get("tool_calls").is_none())
    {
        messages.pop();
        prefill = false;
    }
    let tools = b
        .tools
        .as_ref()
        .filter(|t| !t.is_null())
        .map(convert_tools)
        .transpose()?;
    let (tool_choice, parallel) = match b.tool_choice.as_ref().filter(|c| !c.is_null()) {
        Some(c) => {
            let (c, p) = convert_choice(c)?;
            (Some(c), p)
        }
        None => (None, None),
    };
    let mut kwargs = Map::new();
    if let Some(on) = b
        .thinking
        .as_ref()
        .map(thinking_switch)
        .transpose()?
        .flatten()
    {
        kwargs.insert("enable_thinking".into(), Value::Bool(on));
    }
    let config = b.output_config.as_ref().filter(|c| !c.is_null());
    if config.is_some_and(|c| !c.is_object()) {
        return Err(bad("output_config", "`output_config` must be an object"));
    }
    let response_format = match (config.and_then(|c| c.get("format")), &b.output_format) {
        (Some(f), _) if !f.is_null() => output_format(f, "output_config.format")?,
        (_, Some(f)) => output_format(f, "output_format")?,
        _ => None,
    };
    let mut inferd = b.inferd.clone();
    if let Some(e) = config.and_then(|c| c.get("effort")) {
        let ext = inferd.get_or_insert_with(Default::default);
        if ext.effort.is_none() {
            ext.effort = output_effort(e)?;
        }
    }
    let common = CommonParams {
        model: b.model.clone(),
        max_tokens,
        temperature: b.temperature,
        top_p: b.top_p,
        top_k: b.top_k,
        stop: b.stop_sequences.clone().map(Stop::Many),
        stream: b.stream,
        response_format,
        inferd,
        ..Default::default()
    };
    let chat = ChatParams {
        messages: Some(Value::Array(messages)),
        tools,
        tool_choice,
        parallel_tool_calls: parallel,
        chat_template_kwargs: (!kwargs.is_empty()).then_some(kwargs),
        continue_final_message: prefill.then_some(true),
        ..Default::default()
    };
    Ok(ChatRequest { common, chat })
}

/// A pipeline error's `param` in this protocol's names.
pub fn rename_param(mut e: ApiError) -> ApiError {
    if let Some(p) = &e.param {
        let renamed = if p == "stop" {
            Some("stop_sequences".to_string())
        } else if p == "max_completion_tokens" {
            Some("max_tokens".to_string())
        } else if p == "continue_final_message" {
            Some("messages".to_string())
        } else if let Some(rest) = p.strip_prefix("tool_choice.function") {
            Some(format!("tool_choice{rest}"))
        } else if let Some(rest) = p.strip_prefix("response_format.json_schema") {
            Some(format!("output_config.format{rest}"))
        } else if let Some(rest) = p.strip_prefix("response_format") {
            Some(format!("output_config.format{rest}"))
        } else {
            p.strip_prefix("tools[").and_then(|rest| {
                let (i, tail) = rest.split_once(']')?;
                let tail = tail.replace(".function.parameters", ".input_schema");
                Some(format!("tools[{i}]{}", tail.replace(".function", "")))
            })
        };
        if let Some(r) = renamed {
            e.message = e.message.replace(p.as_str(), &r);
            e.param = Some(r);
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> MessagesBody {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn blocks_become_chat_messages() {
        let b = body(json!({
            "max_tokens": 10,
            "system": [{"type": "text", "text": "be brief"}],
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "checking"},
                    {"type": "tool_use", "id": "t1", "name": "w", "input": {"city": "Oslo"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "cold", "is_error": true},
                    {"type": "text", "text": "and now?"}]}
            ],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "tools": [{"name": "w", "input_schema": {"type": "object"}}],
            "thinking": {"type": "disabled"}
        }));
        let r = to_chat(&b, false).unwrap();
        let m = r.chat.messages.unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            r#"{"city":"Oslo"}"#
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "t1", "content": "Error: cold"})
        );
        assert_eq!(m[4]["content"], "and now?");
        assert_eq!(r.chat.tool_choice, Some(json!("required")));
        assert_eq!(r.chat.parallel_tool_calls, Some(false));
        assert_eq!(
            r.chat.tools.unwrap()[0]["function"]["parameters"]["type"],
            "object"
        );
        assert_eq!(
            r.chat.chat_template_kwargs.unwrap()["enable_thinking"],
            false
        );
    }

    #[test]
    fn bad_bodies_name_the_field() {
        let p = |v: Value| to_chat(&body(v), false).unwrap_err().param.unwrap();
        assert_eq!(
            p(json!({"messages": [{"role": "user", "content": "x"}]})),
            "max_tokens"
        );
        assert_eq!(
            p(
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {}}]}]})
            ),
            "messages[0].content[0]"
        );
        assert_eq!(
            p(json!({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]})),
            "messages[0].role"
        );
        assert_eq!(
            p(
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                "tool_choice": {"type": "tool"}})
            ),
            "tool_choice.name"
        );
        let e = rename_param(ApiError::invalid_param(
            "tools[1].function.parameters",
            "bad",
        ));
        assert_eq!(e.param.as_deref(), Some("tools[1].input_schema"));
        let e = rename_param(ApiError::invalid_param(
            "tool_choice.function.name",
            "`tool_choice.function.name` is \"z\"",
        ));
        assert_eq!(e.param.as_deref(), Some("tool_choice.name"));
        assert_eq!(e.message, "`tool_choice.name` is \"z\"");
        let user = json!([{"role": "user", "content": "x"}]);
        for (field, value, param) in [
            ("temperature", json!(1.5), "temperature"),
            ("top_k", json!(-5), "top_k"),
            (
                "output_config",
                json!({"format": {"type": "json_schema"}}),
                "output_config.format.schema",
            ),
            (
                "output_config",
                json!({"effort": "extreme"}),
                "output_config.effort",
            ),
            (
                "output_format",
                json!({"type": "xml", "schema": {}}),
                "output_format.type",
            ),
        ] {
            let mut b = json!({"max_tokens": 5, "messages": user});
            b[field] = value;
            assert_eq!(p(b), param, "{field}");
        }
    }

    /// A final assistant message is continued (an empty one is a new turn); thinking's
    /// newer types switch reasoning on; output_config maps to the reply format and effort.
    #[test]
    fn prefill_thinking_and_output_config() {
        let two = |last: Value| {
            body(json!({"max_tokens": 5, "messages": [
                {"role": "user", "content": "x"}, {"role": "assistant", "content": last}],
                "thinking": {"type": "adaptive"},
                "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}},
                                  "effort": "max"}}))
        };
        let r = to_chat(&two(json!("{\"a\":")), false).unwrap();
        assert_eq!(r.chat.continue_final_message, Some(true));
        assert_eq!(r.chat.messages.unwrap().as_array().unwrap().len(), 2);
        assert_eq!(
            r.chat.chat_template_kwargs.unwrap()["enable_thinking"],
            true
        );
        assert_eq!(
            r.common.response_format.unwrap()["json_schema"]["schema"],
            json!({"type": "object"})
        );
        assert_eq!(r.common.inferd.unwrap().effort, Some(Effort::High));
        let r = to_chat(&two(json!([])), false).unwrap();
        assert_eq!(r.chat.continue_final_message, None);
        assert_eq!(r.chat.messages.unwrap().as_array().unwrap().len(), 1);
        let e = to_chat(&two(json!("ends in a space ")), false).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[1].content"));
    }
}
