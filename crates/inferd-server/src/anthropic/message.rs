//! The reply as a Messages API `message`: content blocks, `stop_reason`, usage.

use inferd_engine::{FinishReason, Usage};
use serde_json::{json, Value};

use crate::reply::{Call, Reply};

/// `stop_reason` of a reply.
pub fn stop_reason(reason: FinishReason, stop: Option<&str>, has_calls: bool) -> &'static str {
    match reason {
        FinishReason::Length => "max_tokens",
        FinishReason::Stop if has_calls => "tool_use",
        FinishReason::Stop if stop.is_some() => "stop_sequence",
        FinishReason::Stop => "end_turn",
    }
}

/// Usage as Anthropic counts it: `input_tokens` are the prompt tokens computed, the
/// cached ones are `cache_read_input_tokens`.
pub fn usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens.saturating_sub(u.cached_tokens),
        "output_tokens": u.completion_tokens,
        "cache_read_input_tokens": u.cached_tokens,
        "cache_creation_input_tokens": 0,
    })
}

/// A call's arguments as the `input` object (`{}` if the model wrote no object).
pub fn input(c: &Call) -> Value {
    serde_json::from_str::<Value>(&c.arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}))
}

/// A whole `message` object.
pub struct Whole<'a> {
    pub id: &'a str,
    pub model: &'a str,
    pub reply: &'a Reply,
    pub reason: FinishReason,
    pub stop: Option<&'a str>,
    pub usage: Usage,
}

impl Whole<'_> {
    pub fn json(&self) -> Value {
        let r = self.reply;
        let mut content = Vec::new();
        if let Some(t) = &r.reasoning {
            content.push(json!({"type": "thinking", "thinking": t, "signature": ""}));
        }
        // No text, no block: as the stream, which opens a block only for text.
        if !r.text.is_empty() {
            content.push(json!({"type": "text", "text": r.text}));
        }
        for c in &r.calls {
            content.push(
                json!({"type": "tool_use", "id": super::tool_use_id(&c.id), "name": c.name,
                    "input": input(c)}),
            );
        }
        let reason = stop_reason(self.reason, self.stop, !r.calls.is_empty() && !r.cut_short);
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": if reason == "stop_sequence" { self.stop } else { None },
            "usage": usage(&self.usage),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons() {
        assert_eq!(stop_reason(FinishReason::Length, None, true), "max_tokens");
        assert_eq!(stop_reason(FinishReason::Stop, None, true), "tool_use");
        assert_eq!(
            stop_reason(FinishReason::Stop, Some("x"), false),
            "stop_sequence"
        );
        assert_eq!(stop_reason(FinishReason::Stop, None, false), "end_turn");
        let u = usage(&Usage {
            prompt_tokens: 10,
            completion_tokens: 3,
            cached_tokens: 4,
        });
        assert_eq!(
            (
                u["input_tokens"].as_u64(),
                u["cache_read_input_tokens"].as_u64()
            ),
            (Some(6), Some(4))
        );
    }
}
