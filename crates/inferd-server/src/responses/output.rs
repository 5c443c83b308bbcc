//! The reply as a Responses API `response`: output items (`reasoning`, `message` with
//! `output_text`, `function_call`), usage with cached tokens, status.

use inferd_engine::{FinishReason, Usage};
use serde_json::{json, Value};

use crate::openai::oid;
use crate::reply::Reply;

/// One output item.
#[derive(Clone, Debug)]
pub enum Item {
    Reasoning {
        id: String,
        text: String,
    },
    Message {
        id: String,
        text: String,
    },
    Call {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// Where an output item stands: announced (no content yet), whole, or cut off by
/// `max_output_tokens` (the last item of an `incomplete` response).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemStatus {
    InProgress,
    Completed,
    Incomplete,
}

impl ItemStatus {
    fn as_str(self) -> &'static str {
        match self {
            ItemStatus::InProgress => "in_progress",
            ItemStatus::Completed => "completed",
            ItemStatus::Incomplete => "incomplete",
        }
    }
}

impl Item {
    /// The item as JSON; in progress: as announced, before its content.
    pub fn json(&self, state: ItemStatus) -> Value {
        let done = state != ItemStatus::InProgress;
        let status = state.as_str();
        match self {
            Item::Reasoning { id, text } => json!({"type": "reasoning", "id": id, "summary": [],
                "content": if done { json!([{"type": "reasoning_text", "text": text}]) } else { json!([]) }}),
            Item::Message { id, text } => json!({"type": "message", "id": id, "status": status,
                "role": "assistant",
                "content": if done { json!([text_part(text)]) } else { json!([]) }}),
            Item::Call {
                id,
                call_id,
                name,
                arguments,
            } => json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
                "arguments": if done { arguments.as_str() } else { "" }, "status": status}),
        }
    }
}

pub fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// A whole reply's items.
pub fn items(r: &Reply) -> Vec<Item> {
    let mut out = Vec::new();
    if let Some(t) = &r.reasoning {
        out.push(Item::Reasoning {
            id: oid("rs"),
            text: t.clone(),
        });
    }
    if !r.text.is_empty() || r.calls.is_empty() {
        out.push(Item::Message {
            id: oid("msg"),
            text: r.text.clone(),
        });
    }
    for c in &r.calls {
        out.push(Item::Call {
            id: oid("fc"),
            call_id: c.id.clone(),
            name: c.name.clone(),
            arguments: c.arguments.clone(),
        });
    }
    out
}

/// The items as one assistant chat message (for the stored conversation).
pub fn as_message(items: &[Item]) -> Value {
    let mut text = String::new();
    let mut calls = Vec::new();
    for it in items {
        match it {
            Item::Message { text: t, .. } => text.push_str(t),
            Item::Call {
                call_id,
                name,
                arguments,
                ..
            } => calls.push(json!({"id": call_id, "type": "function",
                "function": {"name": name, "arguments": arguments}})),
            Item::Reasoning { .. } => {}
        }
    }
    let mut m = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls);
    }
    m
}

pub fn usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    })
}

/// The response object's fields that echo the request.
#[derive(Clone, Debug)]
pub struct Echo {
    pub id: String,
    pub created_at: u64,
    pub model: String,
    pub fields: Value,
}

/// How a finished reply ended.
pub struct Ending<'a> {
    pub reason: FinishReason,
    pub usage: &'a Usage,
}

impl Echo {
    /// The response object: in progress (`end` None) or finished.
    pub fn response(&self, items: &[Item], end: Option<Ending>) -> Value {
        let mut r = self.fields.clone();
        let (status, incomplete, usage) = match &end {
            None => ("in_progress", Value::Null, Value::Null),
            Some(e) if e.reason == FinishReason::Length => (
                "incomplete",
                json!({"reason": "max_output_tokens"}),
                usage(e.usage),
            ),
            Some(e) => ("completed", Value::Null, usage(e.usage)),
        };
        let cut = end
            .as_ref()
            .is_some_and(|e| e.reason == FinishReason::Length);
        let output: Vec<Value> = if end.is_some() {
            let last = items.len().saturating_sub(1);
            (items.iter().enumerate())
                .map(|(k, i)| i.json(item_status(cut && k == last)))
                .collect()
        } else {
            Vec::new()
        };
        r["id"] = json!(self.id);
        r["object"] = json!("response");
        r["created_at"] = json!(self.created_at);
        r["model"] = json!(self.model);
        r["status"] = json!(status);
        r["error"] = Value::Null;
        r["incomplete_details"] = incomplete;
        r["output"] = Value::Array(output);
        r["usage"] = usage;
        r
    }
}

/// A finished item's status: the last item of a reply cut by its token limit is
/// `incomplete`, every other one `completed`.
pub fn item_status(cut: bool) -> ItemStatus {
    if cut {
        ItemStatus::Incomplete
    } else {
        ItemStatus::Completed
    }
}

/// The echoed request fields, with OpenAI's defaults.
pub fn echo_fields(b: &super::request::ResponsesBody) -> Value {
    json!({
        "instructions": b.instructions,
        "max_output_tokens": b.max_output_tokens,
        "metadata": b.metadata.clone().unwrap_or_default(),
        "parallel_tool_calls": b.parallel_tool_calls.unwrap_or(true),
        "previous_response_id": b.previous_response_id,
        "reasoning": {"effort": b.reasoning.as_ref().and_then(|r| r.get("effort")).cloned(), "summary": null},
        "store": b.store.unwrap_or(true),
        "temperature": b.temperature.unwrap_or(1.0),
        "text": b.text.clone().filter(|t| !t.is_null()).unwrap_or_else(|| json!({"format": {"type": "text"}})),
        "tool_choice": b.tool_choice.clone().filter(|t| !t.is_null()).unwrap_or_else(|| json!("auto")),
        "tools": b.tools.clone().filter(|t| !t.is_null()).unwrap_or_else(|| json!([])),
        "top_p": b.top_p.unwrap_or(1.0),
        "truncation": "disabled",
    })
}
