//! The Responses API's stream: `response.created`, `response.in_progress`, then per
//! output item `response.output_item.added`, its content (`response.reasoning_text.delta`s
//! for a thinking block; `response.content_part.added` and `response.output_text.delta`s;
//! or `response.function_call_arguments.delta`s), its
//! done events and `response.output_item.done`, and last `response.completed` (or
//! `response.incomplete`). Every event carries a `sequence_number`.

use axum::body::Bytes;
use inferd_engine::{Delta, FinishReason};
use serde_json::{json, Value};

use super::output::{item_status, text_part, Echo, Ending, Item, ItemStatus};
use crate::error::ApiError;
use crate::openai::oid;
use crate::openai::sse::{event, ChunkFormat, End};
use crate::reply::{ReplyStream, Streamed};

/// Called with the finished response and its items (stores it).
pub type OnDone = Box<dyn FnOnce(&Value, &[Item]) + Send>;

pub struct ResponseStream {
    echo: Echo,
    reply: ReplyStream,
    items: Vec<Item>,
    /// The last item is still being written.
    open: bool,
    seq: u64,
    on_done: Option<OnDone>,
}

impl ResponseStream {
    pub fn new(echo: Echo, reply: ReplyStream, on_done: OnDone) -> Self {
        ResponseStream {
            echo,
            reply,
            items: Vec::new(),
            open: false,
            seq: 0,
            on_done: Some(on_done),
        }
    }

    fn ev(&mut self, kind: &str, mut v: Value) -> Bytes {
        v["type"] = json!(kind);
        v["sequence_number"] = json!(self.seq);
        self.seq += 1;
        event(kind, &v)
    }

    fn add(&mut self, item: Item, out: &mut Vec<Bytes>) {
        self.close(false, out);
        let index = self.items.len();
        let added = self.ev(
            "response.output_item.added",
            json!({"output_index": index, "item": item.json(ItemStatus::InProgress)}),
        );
        out.push(added);
        if let Item::Message { id, .. } = &item {
            let part = json!({"item_id": id, "output_index": index, "content_index": 0,
                "part": text_part("")});
            let b = self.ev("response.content_part.added", part);
            out.push(b);
        }
        self.items.push(item);
        self.open = true;
    }

    /// Ends the item being written; `cut`: the reply's token limit cut it off.
    fn close(&mut self, cut: bool, out: &mut Vec<Bytes>) {
        if !self.open {
            return;
        }
        self.open = false;
        let index = self.items.len() - 1;
        let item = self.items[index].clone();
        match &item {
            Item::Message { id, text } => {
                let at = json!({"item_id": id, "output_index": index, "content_index": 0});
                let mut done = at.clone();
                done["text"] = json!(text);
                done["logprobs"] = json!([]);
                let b = self.ev("response.output_text.done", done);
                out.push(b);
                let mut part = at;
                part["part"] = text_part(text);
                let b = self.ev("response.content_part.done", part);
                out.push(b);
            }
            Item::Call {
                id,
                name,
                arguments,
                ..
            } => {
                let b = self.ev(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "name": name, "arguments": arguments}),
                );
                out.push(b);
            }
            Item::Reasoning { id, text } => {
                let b = self.ev(
                    "response.reasoning_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                );
                out.push(b);
            }
        }
        let b = self.ev(
            "response.output_item.done",
            json!({"output_index": index, "item": item.json(item_status(cut))}),
        );
        out.push(b);
    }

    fn parts(&mut self, streamed: Streamed) -> Vec<Bytes> {
        let mut out = Vec::new();
        if !streamed.reasoning.is_empty() {
            let writing = self.open && matches!(self.items.last(), Some(Item::Reasoning { .. }));
            if !writing {
                let item = Item::Reasoning {
                    id: oid("rs"),
                    text: String::new(),
                };
                self.add(item, &mut out);
            }
            let index = self.items.len() - 1;
            if let Some(Item::Reasoning { id, text }) = self.items.last_mut() {
                text.push_str(&streamed.reasoning);
                let v = json!({"item_id": id.clone(), "output_index": index, "content_index": 0,
                    "delta": streamed.reasoning});
                let b = self.ev("response.reasoning_text.delta", v);
                out.push(b);
            }
        }
        for p in streamed.parts {
            if let Some(text) = p.content.filter(|t| !t.is_empty()) {
                let writing_text =
                    self.open && matches!(self.items.last(), Some(Item::Message { .. }));
                if !writing_text {
                    let item = Item::Message {
                        id: oid("msg"),
                        text: String::new(),
                    };
                    self.add(item, &mut out);
                }
                let index = self.items.len() - 1;
                let Some(Item::Message { id, text: all }) = self.items.last_mut() else {
                    continue;
                };
                all.push_str(&text);
                let v = json!({"item_id": id.clone(), "output_index": index, "content_index": 0,
                    "delta": text, "logprobs": []});
                let b = self.ev("response.output_text.delta", v);
                out.push(b);
            }
            for c in p.tool_calls {
                if let Some(name) = c.function.name {
                    let item = Item::Call {
                        id: oid("fc"),
                        call_id: c.id.unwrap_or_default(),
                        name,
                        arguments: String::new(),
                    };
                    self.add(item, &mut out);
                }
                if c.function.arguments.is_empty() || !self.open {
                    continue;
                }
                let index = self.items.len() - 1;
                let Some(Item::Call { id, arguments, .. }) = self.items.last_mut() else {
                    continue;
                };
                arguments.push_str(&c.function.arguments);
                let v = json!({"item_id": id.clone(), "output_index": index,
                    "delta": c.function.arguments});
                let b = self.ev("response.function_call_arguments.delta", v);
                out.push(b);
            }
        }
        out
    }
}

impl ChunkFormat for ResponseStream {
    fn opening(&mut self) -> Vec<Bytes> {
        let r = self.echo.response(&[], None);
        vec![
            self.ev("response.created", json!({"response": r.clone()})),
            self.ev("response.in_progress", json!({"response": r})),
        ]
    }

    fn delta(&mut self, d: &Delta) -> Vec<Bytes> {
        let parts = self.reply.push(&d.text);
        self.parts(parts)
    }

    fn finish(&mut self, end: End) -> Vec<Bytes> {
        let parts = self.reply.finish();
        let mut out = self.parts(parts);
        if self.items.is_empty() {
            let item = Item::Message {
                id: oid("msg"),
                text: String::new(),
            };
            self.add(item, &mut out);
        }
        self.close(end.reason == FinishReason::Length, &mut out);
        let r = self.echo.response(
            &self.items,
            Some(Ending {
                reason: end.reason,
                usage: &end.usage,
            }),
        );
        if let Some(f) = self.on_done.take() {
            f(&r, &self.items);
        }
        let kind = if r["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        out.push(self.ev(kind, json!({"response": r})));
        out
    }

    fn error(&mut self, e: ApiError) -> Vec<Bytes> {
        let code = e.code.unwrap_or("server_error");
        vec![self.ev(
            "error",
            json!({"code": code, "message": e.message, "param": e.param}),
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A streamed thinking reply is a `reasoning` item with `response.reasoning_text.*`
    /// events, then a `message` item; sequence numbers count up.
    #[test]
    fn a_thinking_block_streams_as_a_reasoning_item() {
        let echo = Echo {
            id: "resp_1".into(),
            created_at: 0,
            model: "x".into(),
            fields: json!({}),
        };
        let mut r = ResponseStream::new(echo, ReplyStream::new(None), Box::new(|_, _| {}));
        let mut out = Vec::new();
        let text = "<think>weigh it</think>Done.";
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(4) {
            let streamed = r.reply.push(&piece.iter().collect::<String>());
            out.extend(r.parts(streamed));
        }
        let end = r.reply.finish();
        out.extend(r.parts(end));
        r.close(false, &mut out);
        let ev: Vec<Value> = crate::openai::sse::parse_events(&out)
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
        let at = |k: &str| kinds.iter().position(|&x| x == k).unwrap();
        assert!(at("response.reasoning_text.delta") < at("response.reasoning_text.done"));
        assert!(at("response.reasoning_text.done") < at("response.output_text.delta"));
        let added: Vec<&str> = ev
            .iter()
            .filter(|e| e["type"] == "response.output_item.added")
            .map(|e| e["item"]["type"].as_str().unwrap())
            .collect();
        assert_eq!(added, ["reasoning", "message"]);
        let done = &ev[at("response.reasoning_text.done")];
        assert_eq!(done["text"], "weigh it");
        let seq: Vec<u64> = ev
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert!(seq.windows(2).all(|w| w[1] == w[0] + 1));
        let Some(Item::Message { text, .. }) = r.items.last() else {
            panic!("the last item is the message")
        };
        assert_eq!(text, "Done.");
    }
}
