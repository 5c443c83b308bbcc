//! `POST /v1/chat/completions`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use inferd_engine::{ContextInfo, Delta, TokenOut};
use inferd_text::{ChatInput, ChatTemplate, Tokenizer};
use serde_json::{Map, Value};

use super::logprobs::chat_logprobs;
use super::sse::{self, data, done, ChunkFormat, End};
use super::tools::{self, DeltaParts, ToolDeltas};
use super::types::{
    ChatChoice, ChatChunk, ChatChunkChoice, ChatCompletion, ChatParams, ChunkDelta, Effort,
};
use super::{collect, fingerprint, new_id, now_secs};
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::memory::{self, ContextMeta};
use crate::pipeline::{self, ChatRequest, Started};
use crate::state::AppState;
use crate::tree;

pub async fn handler(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let req = ChatRequest::from_body(&body)?;
    drop(body);
    let Started {
        stream: rs,
        checked,
        tools: tool_mode,
        logprobs: lp,
        prompt_ids,
        ..
    } = pipeline::start(&state, req).await?;
    let mut fmt = ChatFormat {
        id: new_id("chatcmpl"),
        created: now_secs(),
        model: state.model_name().to_string(),
        fingerprint: fingerprint(),
        tokenizer: state.engine.tokenizer.clone(),
        logprobs: lp.is_some(),
        include_usage: checked.include_usage,
        tools: tool_mode.as_ref().map(ToolDeltas::new),
        want_ids: prompt_ids.is_some(),
        prompt_ids: prompt_ids.clone(),
    };
    if checked.stream {
        return sse::response(rs, fmt, "messages").await;
    }
    let c = collect(rs, "messages").await?;
    let logprobs = fmt
        .logprobs
        .then(|| chat_logprobs(&fmt.tokenizer, &c.tokens));
    let out = ChatCompletion {
        id: std::mem::take(&mut fmt.id),
        object: "chat.completion",
        created: fmt.created,
        model: std::mem::take(&mut fmt.model),
        system_fingerprint: std::mem::take(&mut fmt.fingerprint),
        choices: vec![{
            let (message, has_calls) = tools::message(tool_mode.as_ref(), c.text);
            ChatChoice {
                index: 0,
                message,
                logprobs,
                finish_reason: tools::finish_reason(c.finish_reason, has_calls),
                token_ids: prompt_ids
                    .is_some()
                    .then(|| c.tokens.iter().map(|t| t.id).collect()),
                prompt_token_ids: prompt_ids,
            }
        }],
        usage: c.usage.into(),
    };
    Ok(Json(out).into_response())
}

/// Messages -> template -> token ids. With a context, the context's messages come
/// first and its tokens are kept as prefilled.
pub fn render(
    state: &AppState,
    chat: &ChatParams,
    ctx: Option<&ContextInfo>,
    effort: Option<Effort>,
    open: &str,
) -> Result<Vec<u32>, ApiError> {
    let mut messages = prepare_messages(chat.messages.as_ref())?;
    // The messages' text alone may already be past any context: refuse before rendering.
    state
        .check_text_bytes(text_bytes(&messages))
        .map_err(|e| e.with_param("messages"))?;
    let ctx_meta = ctx.map(ContextMeta::of);
    if let Some(Value::Array(before)) = ctx_meta.as_ref().and_then(|m| m.messages.clone()) {
        let mut all = before;
        all.extend(messages.as_array().cloned().unwrap_or_default());
        messages = Value::Array(all);
    }
    let tools = match &chat.tools {
        None | Some(Value::Null) => None,
        Some(t @ Value::Array(_)) => Some(t),
        Some(_) => {
            return Err(ApiError::invalid_param(
                "tools",
                "`tools` must be an array of tool definitions",
            ))
        }
    };
    // `tool_choice: "none"`: the model must not call tools, so it is not shown them.
    let tools = tools.filter(|_| chat.tool_choice.as_ref().and_then(Value::as_str) != Some("none"));
    let has_switch = state
        .template
        .as_ref()
        .is_some_and(|t| t.has_thinking_switch());
    let extra = effort_kwargs(
        chat.chat_template_kwargs.clone().unwrap_or_default(),
        effort,
        has_switch,
    );
    let (generation_prompt, continued) = turn_end(chat, &mut messages)?;
    let mut text = render_text(state, &messages, tools, generation_prompt, extra)?;
    if let Some(fin) = continued {
        text = cut_after(text, &fin)?;
    }
    // tool_choice required / a named function: the turn starts inside a call.
    text.push_str(open);
    match ctx {
        Some(c) => memory::continue_context(state, c, &text),
        // The template writes its own special tokens (BOS included), as HF's apply_chat_template.
        None => state.encode(&text, false),
    }
    .map_err(|e| e.with_param("messages"))
}

/// How the prompt ends: with the template's assistant header (a new turn, the default),
/// without it (`add_generation_prompt: false`), or inside the final assistant message,
/// whose text the reply continues (`continue_final_message`; that text is returned, to
/// cut the rendering after it). A final message without text is taken out and a new
/// turn started instead, which is the same prompt.
fn turn_end(chat: &ChatParams, messages: &mut Value) -> Result<(bool, Option<String>), ApiError> {
    let bad = |msg: &str| ApiError::invalid_param("continue_final_message", msg);
    match (chat.continue_final_message, chat.add_generation_prompt) {
        (Some(true), Some(true)) => {
            return Err(bad(
                "`continue_final_message` and `add_generation_prompt` cannot both be true",
            ))
        }
        (Some(true), _) => {}
        (_, generation_prompt) => return Ok((generation_prompt.unwrap_or(true), None)),
    }
    let Some(list) = messages.as_array_mut() else {
        return Ok((true, None));
    };
    let Some(last) = list.last().filter(|m| m["role"] == "assistant") else {
        return Err(bad(
            "`continue_final_message` continues the final message, which must be the assistant's",
        ));
    };
    if last["tool_calls"].as_array().is_some_and(|c| !c.is_empty()) {
        return Err(bad(
            "`continue_final_message`: the final assistant message holds tool calls; only text can be continued",
        ));
    }
    let text = last["content"].as_str().unwrap_or_default();
    if text.trim().is_empty() {
        list.pop();
        return Ok((true, None));
    }
    Ok((false, Some(text.to_string())))
}

/// The rendered prompt cut after the final message's text, as transformers cuts it for
/// `continue_final_message`: after the last place the trimmed text occurs, keeping the
/// text's trailing whitespace where the template kept it (and the template's end of the
/// turn goes).
fn cut_after(mut rendered: String, text: &str) -> Result<String, ApiError> {
    let core = text.trim();
    let Some(at) = rendered.rfind(core) else {
        return Err(ApiError::unprocessable(
            "the model's chat template does not show the final message's text, so it cannot be continued",
        )
        .with_param("messages")
        .with_code("chat_template_error"));
    };
    let lead = text.trim_start();
    let end = at
        + if rendered[at..].starts_with(lead) {
            lead.len()
        } else {
            core.len()
        };
    rendered.truncate(end);
    Ok(rendered)
}

/// `inferd.effort` as the template's reasoning switch: `enable_thinking` is false for
/// `low` and true otherwise, where the template has the switch and the request did not
/// set it itself.
fn effort_kwargs(
    mut kwargs: Map<String, Value>,
    effort: Option<Effort>,
    has_switch: bool,
) -> Map<String, Value> {
    if let Some(e) = effort.filter(|_| has_switch) {
        kwargs
            .entry("enable_thinking")
            .or_insert(Value::Bool(e.thinking()));
    }
    kwargs
}

/// Prepared messages -> the chat template's text.
pub fn render_text(
    state: &AppState,
    messages: &Value,
    tools: Option<&Value>,
    add_generation_prompt: bool,
    extra: Map<String, Value>,
) -> Result<String, ApiError> {
    let Some(template) = &state.template else {
        return Err(ApiError::bad_request(
            "this model has no chat template; use /v1/completions with a plain prompt",
        ));
    };
    let input = ChatInput {
        messages,
        tools,
        add_generation_prompt,
        extra,
    };
    render_template(template, &input)
}

/// Renders the chat template. A template that rejects well-formed messages (Jinja
/// `raise_exception`, e.g. "roles must alternate") is a 422: the request is valid JSON
/// with the right types, but this model cannot process it.
fn render_template(template: &ChatTemplate, input: &ChatInput) -> Result<String, ApiError> {
    template.render(input).map_err(|e| {
        ApiError::unprocessable(format!(
            "the model's chat template rejected the messages: {e}"
        ))
        .with_param("messages")
        .with_code("chat_template_error")
    })
}

/// Bytes of the strings in `v` (message text), walked without recursion.
fn text_bytes(v: &Value) -> usize {
    let mut n = 0;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => n += s.len(),
            Value::Array(a) => stack.extend(a),
            Value::Object(m) => stack.extend(m.values()),
            _ => {}
        }
    }
    n
}

/// Message roles a chat may hold (`developer` is read as `system`).
const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// Checks the OpenAI message list and rewrites it into what chat templates expect:
/// text-part arrays become one string, `developer` becomes `system`, and tool-call
/// arguments given as JSON strings become objects (as many as one tree budget holds,
/// [`tree::MAX_VALUES`]; the rest stay strings).
pub fn prepare_messages(messages: Option<&Value>) -> Result<Value, ApiError> {
    tree::with_budget(|| prepare_within(messages))
}

fn prepare_within(messages: Option<&Value>) -> Result<Value, ApiError> {
    let bad = |param: String, msg: String| ApiError::invalid_param(&param, msg);
    let list = match messages {
        None | Some(Value::Null) => {
            return Err(bad("messages".into(), "`messages` is required".into()))
        }
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(bad(
                "messages".into(),
                "`messages` must be an array of message objects".into(),
            ))
        }
    };
    if list.is_empty() {
        return Err(bad(
            "messages".into(),
            "`messages` must hold at least one message".into(),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let at = |f: &str| format!("messages[{i}]{f}");
        let Some(obj) = m.as_object() else {
            return Err(bad(at(""), format!("{} must be an object", at(""))));
        };
        let mut obj: Map<String, Value> = obj.clone();
        match obj.get("role") {
            Some(Value::String(r)) if r == "developer" => {
                obj.insert("role".into(), Value::from("system"));
            }
            Some(Value::String(r)) if ROLES.contains(&r.as_str()) => {}
            Some(Value::String(r)) => {
                return Err(bad(
                    at(".role"),
                    format!(
                        "{} `{r}` is not a role: use one of {}",
                        at(".role"),
                        ROLES.join(", ")
                    ),
                ))
            }
            _ => {
                return Err(bad(
                    at(".role"),
                    format!("{} must be a string", at(".role")),
                ))
            }
        }
        match obj.get("content") {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(Value::Array(parts)) => {
                let mut texts = Vec::with_capacity(parts.len());
                for (j, p) in parts.iter().enumerate() {
                    let kind = p.get("type").and_then(Value::as_str);
                    match (kind, p.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(t)) => texts.push(t),
                        _ => {
                            return Err(bad(
                                at(&format!(".content[{j}]")),
                                format!(
                                "{} must be a text part ({{\"type\": \"text\", \"text\": ...}}); \
                                     other content types are not supported",
                                at(&format!(".content[{j}]"))
                            ),
                            ))
                        }
                    }
                }
                obj.insert("content".into(), Value::from(texts.join("\n")));
            }
            Some(_) => {
                return Err(bad(
                    at(".content"),
                    format!(
                        "{} must be a string or an array of text parts",
                        at(".content")
                    ),
                ))
            }
        }
        if let Some(Value::Array(calls)) = obj.get_mut("tool_calls") {
            for call in calls {
                if let Some(f) = call.get_mut("function") {
                    let parsed = f
                        .get("arguments")
                        .and_then(Value::as_str)
                        .filter(|s| s.trim_start().starts_with('{'))
                        .and_then(tree::parse_within)
                        .filter(Value::is_object);
                    if let Some(args) = parsed {
                        f["arguments"] = args;
                    }
                }
            }
        }
        out.push(Value::Object(obj));
    }
    Ok(Value::Array(out))
}

/// Streamed `chat.completion.chunk`s.
struct ChatFormat {
    id: String,
    created: u64,
    model: String,
    fingerprint: String,
    tokenizer: Arc<Tokenizer>,
    logprobs: bool,
    include_usage: bool,
    /// Set when the reply may hold tool calls.
    tools: Option<ToolDeltas>,
    /// `return_token_ids`: each chunk's ids; the prompt's go in the opening chunk.
    want_ids: bool,
    prompt_ids: Option<Vec<u32>>,
}

impl ChatFormat {
    fn parts_chunk(&self, p: DeltaParts, tokens: &[TokenOut]) -> Bytes {
        let logprobs = self
            .logprobs
            .then(|| chat_logprobs(&self.tokenizer, tokens));
        data(&self.chunk(vec![ChatChunkChoice {
            delta: ChunkDelta {
                role: None,
                content: p.content,
                tool_calls: (!p.tool_calls.is_empty()).then_some(p.tool_calls),
            },
            logprobs,
            token_ids: self.ids_of(tokens),
            ..Default::default()
        }]))
    }

    /// With `return_token_ids`: the ids of `tokens`.
    fn ids_of(&self, tokens: &[TokenOut]) -> Option<Vec<u32>> {
        self.want_ids.then(|| tokens.iter().map(|t| t.id).collect())
    }

    fn chunk(&self, choices: Vec<ChatChunkChoice>) -> ChatChunk {
        ChatChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.clone(),
            system_fingerprint: self.fingerprint.clone(),
            choices,
            usage: self.include_usage.then_some(None),
        }
    }
}

impl ChatFormat {
    /// Chunks for tool-stream parts; held-back tokens' logprobs go with the first one.
    fn tool_chunks(&self, t: &mut ToolDeltas, parts: Vec<DeltaParts>) -> Vec<Bytes> {
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            let tokens = std::mem::take(&mut t.pending_tokens);
            out.push(self.parts_chunk(p, &tokens));
        }
        out
    }
}

impl ChunkFormat for ChatFormat {
    fn opening(&mut self) -> Vec<Bytes> {
        let prompt_token_ids = self.prompt_ids.take();
        vec![data(&self.chunk(vec![ChatChunkChoice {
            delta: ChunkDelta {
                role: Some("assistant"),
                content: Some(String::new()),
                tool_calls: None,
            },
            prompt_token_ids,
            token_ids: self.ids_of(&[]),
            ..Default::default()
        }]))]
    }

    fn delta(&mut self, d: &Delta) -> Vec<Bytes> {
        let Some(mut t) = self.tools.take() else {
            let part = DeltaParts {
                content: Some(d.text.clone()),
                tool_calls: Vec::new(),
            };
            return vec![self.parts_chunk(part, &d.tokens)];
        };
        t.pending_tokens.extend(d.tokens.iter().cloned());
        let parts = t.push(&d.text);
        let out = self.tool_chunks(&mut t, parts);
        self.tools = Some(t);
        out
    }

    fn finish(&mut self, end: End) -> Vec<Bytes> {
        let reason = end.reason;
        let mut out = Vec::new();
        let mut has_calls = false;
        // Tokens the tool parser still held, whose text no part carried.
        let mut held = Vec::new();
        if let Some(mut t) = self.tools.take() {
            let parts = t.finish();
            out = self.tool_chunks(&mut t, parts);
            has_calls = t.calls_started() > 0 && !t.cut_short();
            held = std::mem::take(&mut t.pending_tokens);
        }
        // Their ids and logprobs go with the last chunk, as in the whole reply.
        let logprobs =
            (self.logprobs && !held.is_empty()).then(|| chat_logprobs(&self.tokenizer, &held));
        out.push(data(&self.chunk(vec![ChatChunkChoice {
            finish_reason: Some(tools::finish_reason(reason, has_calls)),
            token_ids: self.ids_of(&held),
            logprobs,
            ..Default::default()
        }])));
        if self.include_usage {
            let mut c = self.chunk(Vec::new());
            c.usage = Some(Some(end.usage.into()));
            out.push(data(&c));
        }
        out.push(done());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_template_rejection_is_422() {
        let t = ChatTemplate::new(
            "{% if messages[0].role != 'system' %}{{ raise_exception('system first') }}{% endif %}ok",
            None,
            None,
        )
        .unwrap();
        let msgs = json!([{"role": "user", "content": "hi"}]);
        let e = render_template(&t, &ChatInput::new(&msgs)).unwrap_err();
        assert_eq!(e.status.as_u16(), 422);
        assert!(e.message.contains("system first"), "{}", e.message);
        let msgs = json!([{"role": "system", "content": "hi"}]);
        assert_eq!(render_template(&t, &ChatInput::new(&msgs)).unwrap(), "ok");
    }

    #[test]
    fn messages_are_checked_and_normalized() {
        assert!(prepare_messages(None).is_err());
        assert!(prepare_messages(Some(&json!([]))).is_err());
        assert!(prepare_messages(Some(&json!("hi"))).is_err());
        let e = prepare_messages(Some(&json!([{"content": "x"}]))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        let e = prepare_messages(Some(&json!([
            {"role": "user", "content": [{"type": "image_url", "image_url": {}}]}
        ])))
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content[0]"));
        let m = prepare_messages(Some(&json!([
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}
            ]}
        ])))
        .unwrap();
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m[1]["content"], "a\nb");
        assert_eq!(m[2]["tool_calls"][0]["function"]["arguments"]["x"], 1);
    }

    #[test]
    fn tool_call_arguments_become_objects_within_one_budget() {
        // Three calls whose arguments hold half a budget each: the first two are read
        // as objects, the third stays the string it was.
        let big = format!(
            r#"{{"v": [{}]}}"#,
            vec!["1"; tree::MAX_VALUES / 2 - 4].join(",")
        );
        let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "f", "arguments": big}});
        let m = prepare_messages(Some(&json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b"), call("c")]}
        ])))
        .unwrap();
        let args = |i: usize| m[1]["tool_calls"][i]["function"]["arguments"].clone();
        assert!(args(0).is_object() && args(1).is_object());
        assert_eq!(args(2), Value::String(big.clone()));
    }
}

#[cfg(test)]
mod effort_tests {
    use super::*;

    #[test]
    fn effort_maps_to_the_thinking_switch_only_where_there_is_one() {
        let on = |e, sw| {
            effort_kwargs(Map::new(), e, sw)
                .get("enable_thinking")
                .cloned()
        };
        assert_eq!(on(Some(Effort::Low), true), Some(Value::Bool(false)));
        assert_eq!(on(Some(Effort::Medium), true), Some(Value::Bool(true)));
        assert_eq!(on(Some(Effort::High), true), Some(Value::Bool(true)));
        assert_eq!(on(Some(Effort::Low), false), None);
        assert_eq!(on(None, true), None);
        // the request's own setting wins
        let mut own = Map::new();
        own.insert("enable_thinking".into(), Value::Bool(true));
        let k = effort_kwargs(own, Some(Effort::Low), true);
        assert_eq!(k["enable_thinking"], Value::Bool(true));
        assert_eq!(Effort::Low.default_max_tokens(), 256);
    }
}
