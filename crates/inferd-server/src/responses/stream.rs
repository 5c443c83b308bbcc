//! The Responses API's stream: `response.created`, `response.in_progress`, then per
//! output item `response.output_item.added`, its content (`response.content_part.added`
//! and `response.output_text.delta`s, or `response.function_call_arguments.delta`s), its
//! done events and `response.output_item.done`, and last `response.completed` (or
//! `response.incomplete`). Every event carries a `sequence_number`.

use axum::body::Bytes;
use inferd_engine::Delta;
use serde_json::{json, Value};

use super::output::{oid, text_part, Echo, Ending, Item};
use crate::error::ApiError;
use crate::openai::sse::{event, ChunkFormat, End};
use crate::openai::tools::DeltaParts;
use crate::reply::ReplyStream;

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
        self.close(out);
        let index = self.items.len();
        let added = self.ev(
            "response.output_item.added",
            json!({"output_index": index, "item": item.json(false)}),
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

    fn close(&mut self, out: &mut Vec<Bytes>) {
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
            Item::Reasoning { .. } => {}
        }
        let b = self.ev(
            "response.output_item.done",
            json!({"output_index": index, "item": item.json(true)}),
        );
        out.push(b);
    }

    fn parts(&mut self, parts: Vec<DeltaParts>) -> Vec<Bytes> {
        let mut out = Vec::new();
        for p in parts {
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
        self.close(&mut out);
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
