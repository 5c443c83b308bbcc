//! The Messages API's stream: `message_start`, `ping`, per block `content_block_start`,
//! `content_block_delta` (`thinking_delta`, `text_delta`, `input_json_delta`) and `content_block_stop`,
//! then `message_delta` (stop reason, usage) and `message_stop`.

use axum::body::Bytes;
use inferd_engine::{Delta, Usage};
use serde_json::{json, Value};

use super::error;
use super::message::{stop_reason, usage};
use crate::error::ApiError;
use crate::openai::sse::{event, ChunkFormat, End};
use crate::reply::{ReplyStream, Streamed};

/// The block being written.
#[derive(Clone, Copy, PartialEq)]
enum Open {
    None,
    Thinking,
    Text,
    /// A tool call by its index among the reply's calls.
    Call(usize),
}

pub struct MessageStream {
    pub id: String,
    pub model: String,
    pub prompt_tokens: usize,
    reply: ReplyStream,
    open: Open,
    /// Index of the next block.
    next: usize,
    calls: usize,
    /// `message_start` is out.
    opened: bool,
}

impl MessageStream {
    pub fn new(id: String, model: String, prompt_tokens: usize, reply: ReplyStream) -> Self {
        MessageStream {
            id,
            model,
            prompt_tokens,
            reply,
            open: Open::None,
            next: 0,
            calls: 0,
            opened: false,
        }
    }

    /// `message_start` and a `ping`, the first time: the usage splits the prompt into
    /// what was computed and the `cached` tokens read from the cache, as the end does.
    fn started(&mut self, cached: usize) -> Vec<Bytes> {
        if std::mem::replace(&mut self.opened, true) {
            return Vec::new();
        }
        let start = Usage {
            prompt_tokens: self.prompt_tokens,
            cached_tokens: cached,
            ..Default::default()
        };
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage(&start),
        });
        vec![
            event(
                "message_start",
                &json!({"type": "message_start", "message": message}),
            ),
            event("ping", &json!({"type": "ping"})),
        ]
    }

    fn close(&mut self, out: &mut Vec<Bytes>) {
        if self.open != Open::None {
            let index = self.next - 1;
            out.push(event(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            ));
            self.open = Open::None;
        }
    }

    fn start(&mut self, open: Open, block: Value, out: &mut Vec<Bytes>) {
        self.close(out);
        out.push(event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": self.next, "content_block": block}),
        ));
        self.next += 1;
        self.open = open;
    }

    fn block_delta(&self, delta: Value) -> Bytes {
        event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": self.next - 1, "delta": delta}),
        )
    }

    fn parts(&mut self, streamed: Streamed) -> Vec<Bytes> {
        let mut out = Vec::new();
        if !streamed.reasoning.is_empty() {
            if self.open != Open::Thinking {
                let block = json!({"type": "thinking", "thinking": "", "signature": ""});
                self.start(Open::Thinking, block, &mut out);
            }
            let d = json!({"type": "thinking_delta", "thinking": streamed.reasoning});
            out.push(self.block_delta(d));
        }
        for p in streamed.parts {
            if let Some(text) = p.content.filter(|t| !t.is_empty()) {
                if self.open != Open::Text {
                    self.start(Open::Text, json!({"type": "text", "text": ""}), &mut out);
                }
                out.push(self.block_delta(json!({"type": "text_delta", "text": text})));
            }
            for c in p.tool_calls {
                if let Some(name) = c.function.name {
                    let id = super::tool_use_id(&c.id.unwrap_or_default());
                    let block = json!({"type": "tool_use", "id": id,
                        "name": name, "input": {}});
                    self.start(Open::Call(c.index), block, &mut out);
                    self.calls += 1;
                }
                if !c.function.arguments.is_empty() && self.open == Open::Call(c.index) {
                    let d =
                        json!({"type": "input_json_delta", "partial_json": c.function.arguments});
                    out.push(self.block_delta(d));
                }
            }
        }
        out
    }
}

impl ChunkFormat for MessageStream {
    /// Nothing yet: `message_start` goes with the first event, which tells how much of
    /// the prompt came from the cache (its usage has Anthropic's split from the start).
    fn opening(&mut self) -> Vec<Bytes> {
        Vec::new()
    }

    fn delta(&mut self, d: &Delta) -> Vec<Bytes> {
        let mut out = self.started(d.cached_tokens);
        let parts = self.reply.push(&d.text);
        out.extend(self.parts(parts));
        out
    }

    fn finish(&mut self, end: End) -> Vec<Bytes> {
        let mut out = self.started(end.usage.cached_tokens);
        let parts = self.reply.finish();
        out.extend(self.parts(parts));
        self.close(&mut out);
        let called = self.calls > 0 && !self.reply.cut_short();
        let reason = stop_reason(end.reason, end.stop.as_deref(), called);
        let stop = if reason == "stop_sequence" {
            end.stop
        } else {
            None
        };
        out.push(event(
            "message_delta",
            &json!({"type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": stop},
                "usage": usage(&end.usage)}),
        ));
        out.push(event("message_stop", &json!({"type": "message_stop"})));
        out
    }

    fn error(&mut self, e: ApiError) -> Vec<Bytes> {
        vec![event("error", &error::body(&e))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A streamed thinking reply is a `thinking` block, then a `text` block.
    #[test]
    fn a_thinking_block_streams_before_the_text() {
        let mut m = MessageStream::new("m".into(), "x".into(), 3, ReplyStream::new(None));
        let mut out = Vec::new();
        let text = "<think>\nplan it</think>\n\nThe answer.";
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(3) {
            let streamed = m.reply.push(&piece.iter().collect::<String>());
            out.extend(m.parts(streamed));
        }
        let end = m.reply.finish();
        out.extend(m.parts(end));
        m.close(&mut out);
        let ev = crate::openai::sse::parse_events(&out);
        let starts: Vec<&str> = ev
            .iter()
            .filter(|(n, _)| n == "content_block_start")
            .map(|(_, d)| d["content_block"]["type"].as_str().unwrap())
            .collect();
        assert_eq!(starts, ["thinking", "text"]);
        let joined = |kind: &str, field: &str| -> String {
            ev.iter()
                .filter(|(_, d)| d["delta"]["type"] == kind)
                .map(|(_, d)| d["delta"][field].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(joined("thinking_delta", "thinking"), "plan it");
        assert_eq!(joined("text_delta", "text"), "The answer.");
        assert_eq!(
            ev.iter().filter(|(n, _)| n == "content_block_stop").count(),
            2
        );
    }
}
