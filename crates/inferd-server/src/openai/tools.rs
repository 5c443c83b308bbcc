//! Tool calls in chat replies. A request's `tools` / `tool_choice` are checked (400s
//! name the parameter), the model's own tool-call syntax (detected from its chat
//! template, or `--tool-syntax`) is parsed out of the reply, and calls come back as
//! OpenAI `tool_calls`: whole, or streamed as deltas whose `function.arguments` arrive
//! in pieces that concatenate to exactly the whole reply's arguments.
//!
//! `tool_choice: "required"` and a named function start the assistant turn with the
//! syntax's call opening, so the model continues inside a call, and hold the rest of
//! the reply to a grammar of calls (the named function, or any of the tools) whose
//! arguments follow each function's `parameters` schema. The reply is parsed as if the
//! model had written the opening itself.

use inferd_engine::{FinishReason, TokenOut};
use inferd_grammar::CallFormat;
use inferd_tools::{
    check_messages, Parsed, StreamEvent, ToolChoice, ToolRequest, ToolStream, ToolSyntax,
};
use serde_json::Value;

use super::types::{ChatMessageOut, FunctionCallOut, FunctionDelta, ToolCallDelta, ToolCallOut};
use crate::error::ApiError;
use crate::state::AppState;

/// What a request's tools ask of this reply.
#[derive(Clone, Debug)]
pub struct ToolMode {
    pub syntax: ToolSyntax,
    /// `tool_choice` is `required` or a named function: the reply is calls.
    pub forced: bool,
    /// Text the assistant turn starts with (appended to the prompt) when forced: the
    /// syntax's call opening (`<tool_call>\n`; empty for Llama 3 JSON).
    pub open: String,
    pub request: ToolRequest,
    /// `parallel_tool_calls: false`: only the reply's first call is returned (a forced
    /// call is also held to one by its grammar).
    pub single: bool,
}

impl ToolMode {
    /// The calls a reply is held to: with a forced call, calls of the named function
    /// (one) or of any tool (one or more, unless `parallel` is false); otherwise, only
    /// when the answer is constrained too (`response_format`), the calls the model may
    /// make instead of answering.
    pub fn call_format(
        &self,
        answer_constrained: bool,
        parallel: Option<bool>,
    ) -> Option<CallFormat> {
        let forced = self.forced;
        let (tools, parallel) = match &self.request.choice {
            ToolChoice::Function(name) => (
                self.request.tool(name).cloned().into_iter().collect(),
                false,
            ),
            ToolChoice::Required | ToolChoice::Auto => {
                (self.request.tools.clone(), parallel.unwrap_or(true))
            }
            ToolChoice::None => return None,
        };
        (forced || answer_constrained).then(|| CallFormat {
            syntax: self.syntax,
            tools,
            opened: forced,
            parallel,
        })
    }
}

fn tool_error(e: inferd_tools::ToolError) -> ApiError {
    ApiError::invalid_param(&e.param, e.message)
}

/// Checks `tools`, `tool_choice` and the tool messages; `None` when the reply is plain
/// text (no tools, or `tool_choice: "none"`).
pub fn setup(
    state: &AppState,
    tools: Option<&Value>,
    tool_choice: Option<&Value>,
    messages: Option<&Value>,
) -> Result<Option<ToolMode>, ApiError> {
    let req = ToolRequest::parse(tools, tool_choice).map_err(tool_error)?;
    if let Some(m) = messages {
        check_messages(m).map_err(tool_error)?;
    }
    let Some(req) = req.filter(ToolRequest::calls_allowed) else {
        return Ok(None);
    };
    let syntax = state.tool_syntax.ok_or_else(|| {
        ApiError::invalid_param(
            "tools",
            "this model's chat template has no tool-call syntax inferd knows; start the \
             server with --tool-syntax hermes|llama3_json",
        )
    })?;
    let forced = matches!(req.choice, ToolChoice::Required | ToolChoice::Function(_));
    let open = if forced {
        syntax.call_open().to_string()
    } else {
        String::new()
    };
    Ok(Some(ToolMode {
        syntax,
        forced,
        open,
        single: false,
        request: req,
    }))
}

/// The whole reply as an assistant message, read by the streaming parser, so that it is
/// exactly what a stream of the same reply shows (a call the end cut short included, with
/// its arguments so far); `true` when it holds calls and none was cut short.
pub fn message(mode: Option<&ToolMode>, text: String) -> (ChatMessageOut, bool) {
    let Some(m) = mode else {
        return (
            ChatMessageOut {
                role: "assistant",
                content: Some(text),
                tool_calls: None,
            },
            false,
        );
    };
    let mut d = ToolDeltas::new(m);
    let mut events = d.push_events(&text);
    events.extend(d.finish_events());
    let parsed = Parsed::from_events(events);
    let calls: Vec<ToolCallOut> = (parsed.tool_calls.into_iter())
        .map(|c| ToolCallOut {
            id: c.id,
            kind: "function",
            function: FunctionCallOut {
                name: c.name,
                arguments: c.arguments,
            },
        })
        .collect();
    let made_calls = !calls.is_empty() && !d.cut_short();
    (
        ChatMessageOut {
            role: "assistant",
            content: parsed.content,
            tool_calls: (!calls.is_empty()).then_some(calls),
        },
        made_calls,
    )
}

/// `finish_reason` of a reply: `tool_calls` when it made calls (none cut short) and
/// ended by itself.
pub fn finish_reason(reason: FinishReason, has_calls: bool) -> &'static str {
    match reason {
        FinishReason::Stop if has_calls => "tool_calls",
        r => r.as_str(),
    }
}

/// One streamed chunk's worth of a reply with tools.
#[derive(Debug, Default)]
pub struct DeltaParts {
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCallDelta>,
}

/// A reply with tools, streamed: text in, content and tool-call deltas out.
pub struct ToolDeltas {
    stream: ToolStream,
    /// Tokens whose chunk is still held back (their logprobs go with the next chunk).
    pub pending_tokens: Vec<TokenOut>,
    /// Events of the forced prefix (a call's start), sent with the first chunk.
    early: Vec<StreamEvent>,
    /// Only the first call goes out (`parallel_tool_calls: false`).
    single: bool,
}

impl ToolDeltas {
    pub fn new(mode: &ToolMode) -> Self {
        let mut stream = ToolStream::new(mode.syntax);
        // The forced prefix is part of the reply as far as parsing goes (for a named
        // function it already starts the call).
        let early = stream.push(&mode.open);
        ToolDeltas {
            stream,
            pending_tokens: Vec::new(),
            early,
            single: mode.single,
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<DeltaParts> {
        group(self.push_events(text))
    }

    pub fn finish(&mut self) -> Vec<DeltaParts> {
        group(self.finish_events())
    }

    /// [`ToolDeltas::push`]'s events, before they are grouped into chunks.
    fn push_events(&mut self, text: &str) -> Vec<StreamEvent> {
        let mut ev = std::mem::take(&mut self.early);
        ev.extend(self.stream.push(text));
        self.keep(ev)
    }

    fn finish_events(&mut self) -> Vec<StreamEvent> {
        let mut ev = std::mem::take(&mut self.early);
        ev.extend(self.stream.finish());
        self.keep(ev)
    }

    /// Drops the events of calls after the first when only one may go out.
    fn keep(&self, mut ev: Vec<StreamEvent>) -> Vec<StreamEvent> {
        if self.single {
            ev.retain(|e| match e {
                StreamEvent::CallStart { index, .. } | StreamEvent::CallArgs { index, .. } => {
                    *index == 0
                }
                StreamEvent::Content(_) => true,
            });
        }
        ev
    }

    pub fn calls_started(&self) -> usize {
        self.stream.calls_started()
    }

    /// Whether the reply ended inside an announced call (after `finish`).
    pub fn cut_short(&self) -> bool {
        self.stream.cut_short()
    }
}

/// Stream events as chunks: runs of content become one chunk, each call event one chunk.
fn group(events: Vec<StreamEvent>) -> Vec<DeltaParts> {
    let mut out: Vec<DeltaParts> = Vec::new();
    for e in events {
        match e {
            StreamEvent::Content(t) => match out.last_mut() {
                Some(DeltaParts {
                    content: Some(c),
                    tool_calls,
                }) if tool_calls.is_empty() => c.push_str(&t),
                _ => out.push(DeltaParts {
                    content: Some(t),
                    tool_calls: Vec::new(),
                }),
            },
            StreamEvent::CallStart { index, id, name } => out.push(DeltaParts {
                content: None,
                tool_calls: vec![ToolCallDelta {
                    index,
                    id: Some(id),
                    kind: Some("function"),
                    function: FunctionDelta {
                        name: Some(name),
                        arguments: String::new(),
                    },
                }],
            }),
            StreamEvent::CallArgs { index, fragment } => out.push(DeltaParts {
                content: None,
                tool_calls: vec![ToolCallDelta {
                    index,
                    id: None,
                    kind: None,
                    function: FunctionDelta {
                        name: None,
                        arguments: fragment,
                    },
                }],
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hermes(open: &str) -> ToolMode {
        let tools = serde_json::json!([
            {"type": "function", "function": {"name": "f"}},
            {"type": "function", "function": {"name": "g"}}
        ]);
        ToolMode {
            syntax: ToolSyntax::Hermes,
            forced: !open.is_empty(),
            open: open.into(),
            single: false,
            request: ToolRequest::parse(Some(&tools), None).unwrap().unwrap(),
        }
    }

    #[test]
    fn call_formats_follow_tool_choice() {
        let mut m = hermes("<tool_call>\n");
        m.request.choice = ToolChoice::Function("g".into());
        let c = m.call_format(false, None).unwrap();
        assert_eq!((c.tools.len(), c.tools[0].name.as_str()), (1, "g"));
        assert!(c.opened && !c.parallel);
        m.request.choice = ToolChoice::Required;
        let c = m.call_format(false, Some(false)).unwrap();
        assert_eq!((c.tools.len(), c.parallel), (2, false));
        // auto: free text unless the answer is constrained too
        let mut auto = hermes("");
        auto.request.choice = ToolChoice::Auto;
        assert!(auto.call_format(false, None).is_none());
        let c = auto.call_format(true, None).unwrap();
        assert!(!c.opened && c.parallel);
    }

    #[test]
    fn whole_reply_with_a_call() {
        let text = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        let (m, calls) = message(Some(&hermes("")), text.into());
        assert!(calls);
        assert_eq!(m.content.as_deref(), Some("Checking."));
        let c = &m.tool_calls.unwrap()[0];
        assert_eq!(c.function.name, "get_weather");
        assert_eq!(c.function.arguments, r#"{"city":"Paris"}"#);
        assert!(c.id.starts_with("call_"));
        assert_eq!(finish_reason(FinishReason::Stop, true), "tool_calls");
        assert_eq!(finish_reason(FinishReason::Length, true), "length");
    }

    #[test]
    fn forced_prefix_is_parsed_as_part_of_the_reply() {
        let mode = hermes("<tool_call>\n");
        let (m, calls) = message(
            Some(&mode),
            "{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>".into(),
        );
        assert!(calls);
        assert_eq!(m.tool_calls.unwrap()[0].function.arguments, r#"{"x":1}"#);
        // streamed: the same arguments, in pieces
        let mut d = ToolDeltas::new(&mode);
        let mut parts = d.push("{\"name\": \"f\", \"arguments\": {\"x\"");
        parts.extend(d.push(": 1}}\n</tool_call>"));
        parts.extend(d.finish());
        let args: String = parts
            .iter()
            .flat_map(|p| &p.tool_calls)
            .map(|t| t.function.arguments.as_str())
            .collect();
        assert_eq!(args, r#"{"x":1}"#);
        let start = &parts.iter().flat_map(|p| &p.tool_calls).next().unwrap();
        assert_eq!(start.function.name.as_deref(), Some("f"));
        assert_eq!(d.calls_started(), 1);
    }

    #[test]
    fn parallel_tool_calls_false_keeps_the_first_call() {
        let two = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
        let mut mode = hermes("");
        assert_eq!(
            message(Some(&mode), two.into()).0.tool_calls.unwrap().len(),
            2
        );
        mode.single = true;
        let calls = message(Some(&mode), two.into()).0.tool_calls.unwrap();
        assert_eq!((calls.len(), calls[0].function.name.as_str()), (1, "f"));
        let mut d = ToolDeltas::new(&mode);
        let mut parts = d.push(two);
        parts.extend(d.finish());
        assert!(parts
            .iter()
            .flat_map(|p| &p.tool_calls)
            .all(|t| t.index == 0));
        assert!(parts.iter().any(|p| !p.tool_calls.is_empty()));
    }

    #[test]
    fn plain_text_passes_through() {
        let (m, calls) = message(None, "hello".into());
        assert!(!calls);
        assert_eq!(m.content.as_deref(), Some("hello"));
        let mut d = ToolDeltas::new(&hermes(""));
        let mut parts = d.push("hel");
        parts.extend(d.push("lo"));
        parts.extend(d.finish());
        let text: String = parts.iter().filter_map(|p| p.content.clone()).collect();
        assert_eq!(text, "hello");
    }
}
