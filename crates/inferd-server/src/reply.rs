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
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// Splits a thinking block off the start of a reply: `<think>R</think>A`, or `R</think>A`
/// where the template opened the block in the prompt. Text without a closing tag is
/// all answer.
pub fn split_reasoning(text: &str) -> (Option<String>, &str) {
    let body = text.trim_start();
    let opened = body.strip_prefix(THINK_OPEN);
    let inner = opened.unwrap_or(body);
    match inner.find(THINK_CLOSE) {
        Some(end) if opened.is_some() || !inner[..end].contains(THINK_OPEN) => {
            let reasoning = inner[..end].trim().to_string();
            (
                Some(reasoning),
                inner[end + THINK_CLOSE.len()..].trim_start(),
            )
        }
        _ => (None, text),
    }
}

/// Parses a whole reply: reasoning first, then the answer's text and calls.
pub fn whole(mode: Option<&ToolMode>, text: &str) -> Reply {
    let (reasoning, answer) = split_reasoning(text);
    let (msg, _) = tools::message(mode, answer.to_string());
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
    }
}

/// A reply streamed: text in, content and call pieces out (with or without tools).
pub struct ReplyStream {
    tools: Option<ToolDeltas>,
}

impl ReplyStream {
    pub fn new(mode: Option<&ToolMode>) -> Self {
        ReplyStream {
            tools: mode.map(ToolDeltas::new),
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<DeltaParts> {
        match &mut self.tools {
            Some(t) => t.push(text),
            None => vec![DeltaParts {
                content: Some(text.to_string()),
                tool_calls: Vec::new(),
            }],
        }
    }

    pub fn finish(&mut self) -> Vec<DeltaParts> {
        self.tools
            .as_mut()
            .map(ToolDeltas::finish)
            .unwrap_or_default()
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
            split_reasoning("<think>unfinished"),
            (None, "<think>unfinished")
        );
        let r = whole(None, "<think>a</think>b");
        assert_eq!((r.reasoning.as_deref(), r.text.as_str()), (Some("a"), "b"));
    }
}
