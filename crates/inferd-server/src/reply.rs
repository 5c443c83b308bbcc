//! A reply as every protocol sees it: optional reasoning (a thinking template's
//! `<think>…</think>` block), text, and tool calls, whole or streamed. Chat writes these
//! as a message; the Responses and Messages APIs as output items and content blocks.

use crate::openai::tools::{self, DeltaParts, ToolDeltas, ToolMode};

/// One tool call of a reply.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// A whole reply, parsed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reply {
    pub reasoning: Option<String>,
    pub text: String,
    pub calls: Vec<Call>,
    /// The reply ended inside its last call (`max_tokens`, a stop string): its
    /// arguments are not a whole JSON object.
    pub cut_short: bool,
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// Splits a thinking block off the start of a reply: `<think>R</think>A`, or `R</think>A`
/// where the template opened the block in the prompt. A block the reply opened and never
/// closed (cut by `max_tokens`) is all reasoning; text without any tag is all answer.
/// Empty reasoning is none (no block), as a stream shows it.
pub fn split_reasoning(text: &str) -> (Option<String>, &str) {
    let body = text.trim_start();
    let opened = body.strip_prefix(THINK_OPEN);
    let inner = opened.unwrap_or(body);
    let (reasoning, answer) = match inner.find(THINK_CLOSE) {
        Some(end) if opened.is_some() || !inner[..end].contains(THINK_OPEN) => (
            inner[..end].trim(),
            inner[end + THINK_CLOSE.len()..].trim_start(),
        ),
        None if opened.is_some() => (inner.trim(), ""),
        _ => return (None, text),
    };
    (
        (!reasoning.is_empty()).then(|| reasoning.to_string()),
        answer,
    )
}

/// Parses a whole reply: reasoning first, then the answer's text and calls.
pub fn whole(mode: Option<&ToolMode>, text: &str) -> Reply {
    let (reasoning, answer) = split_reasoning(text);
    let (msg, whole_calls) = tools::message(mode, answer.to_string());
    let cut_short = msg.tool_calls.is_some() && !whole_calls;
    let calls = msg
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|c| Call {
            id: c.id,
            name: c.function.name,
            arguments: c.function.arguments,
        })
        .collect();
    Reply {
        reasoning,
        text: msg.content.unwrap_or_default(),
        calls,
        cut_short,
    }
}

/// A reply streamed: text in; reasoning, content and call pieces out (with or without
/// tools).
pub struct ReplyStream {
    think: ThinkSplit,
    tools: Option<ToolDeltas>,
}

/// What one piece of streamed text adds: reasoning first (it precedes the answer), then
/// the answer's content and call pieces.
#[derive(Debug, Default)]
pub struct Streamed {
    pub reasoning: String,
    pub parts: Vec<DeltaParts>,
}

impl ReplyStream {
    pub fn new(mode: Option<&ToolMode>) -> Self {
        ReplyStream {
            think: ThinkSplit::default(),
            tools: mode.map(ToolDeltas::new),
        }
    }

    pub fn push(&mut self, text: &str) -> Streamed {
        let (reasoning, answer) = self.think.push(text);
        Streamed {
            reasoning,
            parts: self.answer(&answer),
        }
    }

    /// Whether the reply ended inside an announced call (after `finish`).
    pub fn cut_short(&self) -> bool {
        self.tools.as_ref().is_some_and(|t| t.cut_short())
    }

    pub fn finish(&mut self) -> Streamed {
        let (reasoning, answer) = self.think.finish();
        let mut parts = self.answer(&answer);
        if let Some(t) = self.tools.as_mut() {
            parts.extend(t.finish());
        }
        Streamed { reasoning, parts }
    }

    fn answer(&mut self, text: &str) -> Vec<DeltaParts> {
        if text.is_empty() {
            return Vec::new();
        }
        match &mut self.tools {
            Some(t) => t.push(text),
            None => vec![DeltaParts {
                content: Some(text.to_string()),
                tool_calls: Vec::new(),
            }],
        }
    }
}

/// Where a streamed reply is, for splitting its thinking block off as `split_reasoning`
/// does a whole one (`<think>R</think>A`, whitespace around R and before A dropped). Text
/// that might still become a tag is held back until it is known; a block the template
/// opened in the prompt (no `<think>` in the reply) streams as answer.
#[derive(Debug, Default)]
struct ThinkSplit {
    state: Think,
    held: String,
}

#[derive(Debug, Default, PartialEq)]
enum Think {
    /// Nothing but whitespace yet: the reply may still open a thinking block.
    #[default]
    Start,
    /// Just inside the block, before its first non-space.
    ReasoningStart,
    /// Inside the block.
    Reasoning,
    /// After the block, before the answer's first non-space.
    AnswerStart,
    Answer,
}

impl ThinkSplit {
    /// (reasoning, answer) text that `text` completes.
    fn push(&mut self, text: &str) -> (String, String) {
        self.held.push_str(text);
        let (mut reasoning, mut answer) = (String::new(), String::new());
        loop {
            match self.state {
                Think::Start => {
                    let t = self.held.trim_start();
                    if t.is_empty() || (t.len() < THINK_OPEN.len() && THINK_OPEN.starts_with(t)) {
                        break;
                    }
                    if let Some(rest) = t.strip_prefix(THINK_OPEN) {
                        self.held = rest.to_string();
                        self.state = Think::ReasoningStart;
                    } else {
                        self.state = Think::Answer;
                    }
                }
                Think::Reasoning => {
                    if let Some(end) = self.held.find(THINK_CLOSE) {
                        reasoning.push_str(self.held[..end].trim_end());
                        self.held = self.held[end + THINK_CLOSE.len()..].to_string();
                        self.state = Think::AnswerStart;
                        continue;
                    }
                    // Hold back trailing whitespace and what may begin the closing tag.
                    let keep = (1..THINK_CLOSE.len())
                        .rev()
                        .find(|&k| self.held.ends_with(&THINK_CLOSE[..k]))
                        .unwrap_or(0);
                    let body = &self.held[..self.held.len() - keep];
                    let cut = body.trim_end().len();
                    reasoning.push_str(&self.held[..cut]);
                    self.held.drain(..cut);
                    break;
                }
                Think::ReasoningStart | Think::AnswerStart => {
                    let t = self.held.trim_start();
                    if t.is_empty() {
                        self.held.clear();
                        break;
                    }
                    self.held = t.to_string();
                    self.state = if self.state == Think::ReasoningStart {
                        Think::Reasoning
                    } else {
                        Think::Answer
                    };
                }
                Think::Answer => {
                    answer.push_str(&self.held);
                    self.held.clear();
                    break;
                }
            }
        }
        (reasoning, answer)
    }

    /// What is still held when the reply ends: a tag that never completed is text; a
    /// block never closed is reasoning.
    fn finish(&mut self) -> (String, String) {
        let held = std::mem::take(&mut self.held);
        match self.state {
            Think::Reasoning => (held.trim_end().to_string(), String::new()),
            Think::ReasoningStart | Think::AnswerStart => (String::new(), String::new()),
            Think::Start | Think::Answer => (String::new(), held),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_is_split_off_the_start() {
        assert_eq!(
            split_reasoning("<think>\nhmm\n</think>\n\nHi"),
            (Some("hmm".into()), "Hi")
        );
        assert_eq!(split_reasoning("hmm</think>Hi"), (Some("hmm".into()), "Hi"));
        assert_eq!(split_reasoning("plain"), (None, "plain"));
        assert_eq!(
            split_reasoning("<think>cut off\n"),
            (Some("cut off".into()), "")
        );
        assert_eq!(split_reasoning("<think>\n"), (None, ""));
        assert_eq!(split_reasoning("<think></think>A"), (None, "A"));
        let r = whole(None, "<think>a</think>b");
        assert_eq!((r.reasoning.as_deref(), r.text.as_str()), (Some("a"), "b"));
    }

    /// Streamed in pieces of every size, a reply splits into the reasoning and answer of
    /// the whole reply (for replies that open their own block: a stream cannot know that
    /// `R</think>A` was reasoning until the tag, so it streams that as answer).
    #[test]
    fn streamed_reasoning_equals_the_whole_split() {
        for text in [
            "<think>\nI should greet.\n  </think>\n\nHello there",
            "  <think>a < b, and </thi is not a tag</think>Hi",
            "<thin is not a tag",
            "<think></think>x",
            "\n\n",
            "<think>\ncut off by max_tokens ",
            "<think>",
            " <think>\n\n",
        ] {
            let (want_r, want_a) = split_reasoning(text);
            for size in 1..=text.len() {
                let mut s = ReplyStream::new(None);
                let (mut r, mut a) = (String::new(), String::new());
                let chars: Vec<char> = text.chars().collect();
                for piece in chars.chunks(size) {
                    let got = s.push(&piece.iter().collect::<String>());
                    r.push_str(&got.reasoning);
                    a.extend(got.parts.into_iter().filter_map(|p| p.content));
                }
                let end = s.finish();
                r.push_str(&end.reasoning);
                a.extend(end.parts.into_iter().filter_map(|p| p.content));
                assert_eq!(
                    r,
                    want_r.clone().unwrap_or_default(),
                    "{text:?} in pieces of {size}"
                );
                assert_eq!(a, want_a, "{text:?} in pieces of {size}");
            }
        }
    }
}
