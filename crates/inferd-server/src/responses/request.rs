//! A Responses API body -> the chat request the pipeline runs. `input` (a string or
//! items: messages with `input_text` parts, `function_call`, `function_call_output`)
//! becomes chat messages after `instructions` and the previous response's conversation;
//! function tools, `tool_choice`, `text.format` (as `response_format`), `reasoning.effort`
//! (as `inferd.effort`) and the sampling fields map one to one.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::openai::new_id;
use crate::openai::types::{ChatParams, CommonParams, Effort, InferdExt};
use crate::pipeline::ChatRequest;

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ResponsesBody {
    pub model: Option<String>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub input: Option<Value>,
    pub instructions: Option<String>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub tools: Option<Value>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub text: Option<Value>,
    pub max_output_tokens: Option<u64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// Extension.
    pub top_k: Option<i64>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub reasoning: Option<Value>,
    #[serde(default, deserialize_with = "crate::tree::bounded_map")]
    pub metadata: Option<Map<String, Value>>,
    pub store: Option<bool>,
    pub previous_response_id: Option<String>,
    pub stream: Option<bool>,
    pub inferd: Option<InferdExt>,
}

/// What the adapter keeps beside the chat request.
#[derive(Debug)]
pub struct Translated {
    pub chat: ChatRequest,
    /// The input items with ids, as `input_items` lists them.
    pub items: Vec<Value>,
    /// The input as chat messages (appended to the stored conversation).
    pub messages: Vec<Value>,
}

fn bad(param: &str, msg: impl Into<String>) -> ApiError {
    ApiError::invalid_param(param, msg)
}

/// Most metadata pairs, and their key and value lengths (as OpenAI).
const METADATA_PAIRS: usize = 16;
const METADATA_KEY: usize = 64;
const METADATA_VALUE: usize = 512;

pub fn check_metadata(m: &Map<String, Value>) -> Result<(), ApiError> {
    if m.len() > METADATA_PAIRS {
        return Err(bad(
            "metadata",
            format!("`metadata` holds at most {METADATA_PAIRS} pairs"),
        ));
    }
    for (k, v) in m {
        let ok = k.len() <= METADATA_KEY && v.as_str().is_some_and(|s| s.len() <= METADATA_VALUE);
        if !ok {
            return Err(bad(
                "metadata",
                format!("`metadata` keys are at most {METADATA_KEY} characters and values strings of at most {METADATA_VALUE}"),
            ));
        }
    }
    Ok(())
}

/// The text of a content value: a string or parts (`input_text`, `output_text`, `text`).
fn content_text(v: &Value, at: &str) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                let pat = format!("{at}[{j}]");
                match p.get("type").and_then(Value::as_str) {
                    Some("input_text" | "output_text" | "text") => {
                        match p.get("text").and_then(Value::as_str) {
                            Some(t) => texts.push(t.to_string()),
                            None => {
                                return Err(bad(&pat, format!("`{pat}.text` must be a string")))
                            }
                        }
                    }
                    Some("refusal") => texts.push(
                        p.get("refusal")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .into(),
                    ),
                    Some(kind) => {
                        return Err(bad(
                            &pat,
                            format!(
                            "`{pat}`: `{kind}` parts are not supported by this server (text only)"
                        ),
                        ))
                    }
                    None => return Err(bad(&pat, format!("`{pat}` must have a `type`"))),
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err(bad(
            at,
            format!("`{at}` must be a string or an array of content parts"),
        )),
    }
}

fn str_field<'a>(item: &'a Value, field: &str, at: &str) -> Result<&'a str, ApiError> {
    item.get(field).and_then(Value::as_str).ok_or_else(|| {
        bad(
            &format!("{at}.{field}"),
            format!("`{at}.{field}` must be a string"),
        )
    })
}

/// The fields of an input item (and of its content parts) this API defines: the item kept
/// and listed back by `input_items`. Anything else a client sends is dropped, so it is not
/// stored (parsed JSON takes many times its text's bytes).
fn known_fields(obj: &Map<String, Value>, kind: &str) -> Map<String, Value> {
    let keys: &[&str] = match kind {
        "message" => &["type", "id", "role", "content", "status"],
        "function_call" => &["type", "id", "call_id", "name", "arguments", "status"],
        "function_call_output" => &["type", "id", "call_id", "output", "status"],
        _ => &["type", "id"],
    };
    let part = |p: &Value| match p.as_object() {
        Some(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| matches!(k.as_str(), "type" | "text" | "refusal"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        None => p.clone(),
    };
    obj.iter()
        .filter(|(k, _)| keys.contains(&k.as_str()))
        .map(|(k, v)| match (k.as_str(), v) {
            ("content" | "output", Value::Array(parts)) => {
                (k.clone(), parts.iter().map(part).collect())
            }
            _ => (k.clone(), v.clone()),
        })
        .collect()
}

/// One input item -> chat messages (a function call joins the assistant message before
/// it); returns the item with an id.
fn convert_item(i: usize, item: &Value, out: &mut Vec<Value>) -> Result<Option<Value>, ApiError> {
    let at = format!("input[{i}]");
    let Some(obj) = item.as_object() else {
        return Err(bad(&at, format!("`{at}` must be an object")));
    };
    let kind = match obj.get("type") {
        None if obj.contains_key("role") => "message",
        None => return Err(bad(&format!("{at}.type"), format!("`{at}` needs a `type`"))),
        Some(t) => t.as_str().ok_or_else(|| {
            bad(
                &format!("{at}.type"),
                format!("`{at}.type` must be a string"),
            )
        })?,
    };
    let mut item = known_fields(obj, kind);
    match kind {
        "message" => {
            let v = Value::Object(obj.clone());
            let role = str_field(&v, "role", &at)?;
            let role = match role {
                "user" | "system" | "assistant" => role,
                "developer" => "system",
                _ => {
                    return Err(bad(
                        &format!("{at}.role"),
                        format!("`{at}.role` must be user, system, developer or assistant"),
                    ))
                }
            };
            let text = content_text(
                obj.get("content").unwrap_or(&Value::Null),
                &format!("{at}.content"),
            )?;
            out.push(json!({"role": role, "content": text}));
            item.insert("type".into(), json!("message"));
            item.entry("id")
                .or_insert_with(|| json!(new_id("msg").replacen('-', "_", 1)));
            if let Some(Value::String(s)) = obj.get("content") {
                item.insert("content".into(), json!([{"type": "input_text", "text": s}]));
            }
        }
        "function_call" => {
            let v = Value::Object(obj.clone());
            let call_id = str_field(&v, "call_id", &at)?;
            let name = str_field(&v, "name", &at)?;
            let args = str_field(&v, "arguments", &at)?;
            let call = json!({"id": call_id, "type": "function",
                "function": {"name": name, "arguments": args}});
            match out.last_mut() {
                Some(m) if m["role"] == "assistant" => {
                    if !m["tool_calls"].is_array() {
                        m["tool_calls"] = json!([]);
                    }
                    if let Some(a) = m["tool_calls"].as_array_mut() {
                        a.push(call);
                    }
                }
                _ => out.push(json!({"role": "assistant", "content": "", "tool_calls": [call]})),
            }
            item.entry("id")
                .or_insert_with(|| json!(new_id("fc").replacen('-', "_", 1)));
        }
        "function_call_output" => {
            let v = Value::Object(obj.clone());
            let call_id = str_field(&v, "call_id", &at)?;
            let output = content_text(
                obj.get("output").unwrap_or(&Value::Null),
                &format!("{at}.output"),
            )?;
            out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
            item.entry("id")
                .or_insert_with(|| json!(new_id("fco").replacen('-', "_", 1)));
        }
        // Earlier reasoning is not shown to the model again.
        "reasoning" => return Ok(None),
        other => {
            return Err(bad(
                &format!("{at}.type"),
                format!("`{at}`: `{other}` items are not supported by this server"),
            ))
        }
    }
    Ok(Some(Value::Object(item)))
}

/// `input` -> (items with ids, chat messages).
pub fn convert_input(input: Option<&Value>) -> Result<(Vec<Value>, Vec<Value>), ApiError> {
    let (mut items, mut messages) = (Vec::new(), Vec::new());
    match input {
        Some(Value::String(s)) => {
            messages.push(json!({"role": "user", "content": s}));
            items.push(json!({"type": "message", "role": "user",
                "id": new_id("msg").replacen('-', "_", 1),
                "content": [{"type": "input_text", "text": s}]}));
        }
        Some(Value::Array(list)) if !list.is_empty() => {
            for (i, it) in list.iter().enumerate() {
                items.extend(convert_item(i, it, &mut messages)?);
            }
        }
        Some(Value::Array(_)) => return Err(bad("input", "`input` must hold at least one item")),
        None | Some(Value::Null) => return Err(bad("input", "`input` is required")),
        Some(_) => {
            return Err(bad(
                "input",
                "`input` must be a string or an array of items",
            ))
        }
    }
    Ok((items, messages))
}

/// Function tools as chat's.
fn convert_tools(tools: &Value) -> Result<Value, ApiError> {
    let Some(list) = tools.as_array() else {
        return Err(bad("tools", "`tools` must be an array of tools"));
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        match t.get("type").and_then(Value::as_str) {
            Some("function") => {}
            Some(other) => {
                return Err(bad(
                    &format!("{at}.type"),
                    format!("`{at}`: `{other}` tools are not supported; give function tools"),
                ))
            }
            None => {
                return Err(bad(
                    &format!("{at}.type"),
                    format!("`{at}.type` must be `function`"),
                ))
            }
        }
        let mut f = Map::new();
        for k in ["name", "description", "parameters", "strict"] {
            if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
                f.insert(k.into(), v.clone());
            }
        }
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(Value::Array(out))
}

fn convert_choice(c: &Value) -> Result<Value, ApiError> {
    match c {
        Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => Ok(c.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o.get("name").cloned().unwrap_or(Value::Null);
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        _ => Err(bad(
            "tool_choice",
            "`tool_choice` must be `auto`, `none`, `required` or {\"type\": \"function\", \"name\": ...}",
        )),
    }
}

/// `text.format` as `response_format`.
fn convert_format(text: &Value) -> Result<Option<Value>, ApiError> {
    let Some(f) = text.get("format").filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match f.get("type").and_then(Value::as_str) {
        Some("json_schema") => {
            let mut js = Map::new();
            for k in ["name", "schema", "strict", "description"] {
                if let Some(v) = f.get(k).filter(|v| !v.is_null()) {
                    js.insert(k.into(), v.clone());
                }
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": js})))
        }
        Some(_) => Ok(Some(f.clone())),
        None => Err(bad(
            "text.format.type",
            "`text.format.type` must be a string",
        )),
    }
}

/// `reasoning.effort` as inferd's effort.
fn effort(r: &Value) -> Result<Option<Effort>, ApiError> {
    match r.get("effort") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(e)) => match e.as_str() {
            "none" | "minimal" | "low" => Ok(Some(Effort::Low)),
            "medium" => Ok(Some(Effort::Medium)),
            "high" | "xhigh" => Ok(Some(Effort::High)),
            _ => Err(bad(
                "reasoning.effort",
                "`reasoning.effort` must be minimal, low, medium or high",
            )),
        },
        Some(_) => Err(bad(
            "reasoning.effort",
            "`reasoning.effort` must be a string",
        )),
    }
}

/// The chat request: `instructions`, then `history` (the previous responses'
/// conversation), then the input. `session` is the engine session of the chain.
pub fn translate(
    b: &ResponsesBody,
    history: &[Value],
    session: Option<String>,
) -> Result<Translated, ApiError> {
    let (items, new) = convert_input(b.input.as_ref())?;
    if let Some(m) = &b.metadata {
        check_metadata(m)?;
    }
    let mut messages = Vec::with_capacity(history.len() + new.len() + 1);
    if let Some(i) = b.instructions.as_ref().filter(|i| !i.is_empty()) {
        messages.push(json!({"role": "system", "content": i}));
    }
    messages.extend(history.iter().cloned());
    messages.extend(new.iter().cloned());
    let tools = b
        .tools
        .as_ref()
        .filter(|t| !t.is_null())
        .map(convert_tools)
        .transpose()?;
    let tool_choice = b
        .tool_choice
        .as_ref()
        .filter(|c| !c.is_null())
        .map(convert_choice)
        .transpose()?;
    let response_format = match &b.text {
        None | Some(Value::Null) => None,
        Some(t @ Value::Object(_)) => convert_format(t)?,
        Some(_) => return Err(bad("text", "`text` must be an object")),
    };
    let mut ext = b.inferd.clone().unwrap_or_default();
    if ext.effort.is_none() {
        ext.effort = b.reasoning.as_ref().map(effort).transpose()?.flatten();
    }
    if ext.session.is_none() {
        ext.session = session;
    }
    let common = CommonParams {
        model: b.model.clone(),
        temperature: b.temperature,
        top_p: b.top_p,
        top_k: b.top_k,
        stream: b.stream,
        response_format,
        inferd: Some(ext),
        ..Default::default()
    };
    let chat = ChatParams {
        messages: Some(Value::Array(messages)),
        max_completion_tokens: b.max_output_tokens,
        tools,
        tool_choice,
        parallel_tool_calls: b.parallel_tool_calls,
        ..Default::default()
    };
    Ok(Translated {
        chat: ChatRequest { common, chat },
        items,
        messages: new,
    })
}

/// A pipeline error's `param` in this protocol's names.
pub fn rename_param(mut e: ApiError) -> ApiError {
    let Some(p) = e.param.clone() else { return e };
    let renamed = if let Some(rest) = p.strip_prefix("response_format.json_schema") {
        format!("text.format{rest}")
    } else if let Some(rest) = p.strip_prefix("response_format") {
        format!("text.format{rest}")
    } else if p.starts_with("messages") {
        "input".to_string()
    } else if p == "max_completion_tokens" {
        "max_output_tokens".to_string()
    } else if p.starts_with("tools[") {
        p.replace(".function", "")
    } else if let Some(rest) = p.strip_prefix("tool_choice.function") {
        format!("tool_choice{rest}")
    } else {
        return e;
    };
    e.message = e.message.replace(p.as_str(), &renamed);
    e.param = Some(renamed);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> ResponsesBody {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn unknown_item_fields_are_not_kept() {
        let input = json!([
            {"role": "user", "junk": [0, 0, 0], "content": [
                {"type": "input_text", "text": "hi", "junk": {"a": 1}}]},
            {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}", "x": 1},
            {"type": "function_call_output", "call_id": "c1", "output": "ok", "y": [1]}
        ]);
        let (items, messages) = convert_input(Some(&input)).unwrap();
        assert_eq!(messages.len(), 3);
        let text = serde_json::to_string(&items).unwrap();
        assert!(!text.contains("junk") && !text.contains("\"x\"") && !text.contains("\"y\""));
        assert_eq!(
            items[0]["content"],
            json!([{"type": "input_text", "text": "hi"}])
        );
        assert_eq!(items[1]["arguments"], "{}");
        assert_eq!(items[2]["output"], "ok");
    }

    #[test]
    fn items_become_chat_messages() {
        let b = body(json!({
            "instructions": "be brief",
            "input": [
                {"role": "user", "content": "weather?"},
                {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{\"city\":\"Oslo\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "cold"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and?"}]}
            ],
            "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "w"},
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": true}},
            "reasoning": {"effort": "low"},
            "max_output_tokens": 7
        }));
        let history = vec![json!({"role": "user", "content": "before"})];
        let t = translate(&b, &history, Some("s".into())).unwrap();
        let m = t.chat.chat.messages.unwrap();
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m[1]["content"], "before");
        assert_eq!(m[3]["tool_calls"][0]["id"], "c1");
        assert_eq!(
            m[4],
            json!({"role": "tool", "tool_call_id": "c1", "content": "cold"})
        );
        assert_eq!(t.items.len(), 4);
        assert!(t.items.iter().all(|i| i["id"].is_string()));
        assert_eq!(t.messages.len(), 4);
        let c = &t.chat.common;
        assert_eq!(
            c.response_format.as_ref().unwrap()["json_schema"]["strict"],
            true
        );
        let ext = c.inferd.as_ref().unwrap();
        assert_eq!(
            (ext.effort, ext.session.as_deref()),
            (Some(Effort::Low), Some("s"))
        );
        assert_eq!(t.chat.chat.max_completion_tokens, Some(7));
        assert_eq!(t.chat.chat.tool_choice.unwrap()["function"]["name"], "w");
    }

    #[test]
    fn bad_input_names_the_field() {
        let p = |v: Value| translate(&body(v), &[], None).unwrap_err().param.unwrap();
        assert_eq!(p(json!({})), "input");
        assert_eq!(
            p(json!({"input": [{"type": "input_image"}]})),
            "input[0].type"
        );
        assert_eq!(
            p(
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})
            ),
            "input[0].content[0]"
        );
        assert_eq!(
            p(json!({"input": "x", "tools": [{"type": "web_search"}]})),
            "tools[0].type"
        );
        assert_eq!(
            p(json!({"input": "x", "reasoning": {"effort": "max"}})),
            "reasoning.effort"
        );
        let e = rename_param(ApiError::invalid_param(
            "response_format.json_schema.schema",
            "bad",
        ));
        assert_eq!(e.param.as_deref(), Some("text.format.schema"));
    }
}
