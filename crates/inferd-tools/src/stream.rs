//! The streaming parse: reply deltas in, content and tool-call events out.
//!
//! # What is held back
//!
//! Every character is examined once, in order, by a small state machine per syntax
//! (`stream/hermes.rs`, `stream/llama3.rs`); nothing depends on how the reply was cut
//! into deltas. Content is emitted as soon as it cannot belong to a call:
//!
//! - a possible start of a marker: a partial `<tool_call>` (Hermes) or, at the start of
//!   a Llama 3 reply, a partial `<|python_tag|>` or a `{`;
//! - whitespace at the end of the content so far (Hermes), until a character that is
//!   not whitespace or a marker decides whether it borders a call (whitespace next to a
//!   call is not content, see [`ToolSyntax`]);
//! - a call from its marker on, until it is announced (below) or turns out not to be a
//!   call, when all of it is emitted as content, in place.
//!
//! # How arguments stream
//!
//! A call is announced ([`StreamEvent::CallStart`]) once its name is complete and its
//! arguments object has begun. From then on each delta yields at most one
//! [`StreamEvent::CallArgs`] per call: the canonical compact JSON of the arguments read
//! so far. The JSON reader writes that form as it goes and never rewrites what it wrote
//! (a string's characters appear one by one, a number when it ends, brackets and
//! separators at once), so for any split of the reply the fragments of a call
//! concatenate to exactly the `arguments` that [`crate::parse()`] returns: both parsers
//! read the call object with the same character-driven reader. Long arguments (code,
//! documents in a string) therefore stream while the model writes them; only an
//! unfinished escape (`\u00e9`), number or literal (`true`) is held until it ends.
//!
//! # What cannot be taken back
//!
//! An announced call cannot be retracted. After the announcement the call can still
//! go wrong two ways:
//!
//! - a JSON syntax error inside its arguments: the call's whole text (marker included)
//!   is emitted as [`StreamEvent::Content`] and parsing goes on after it, so no text is
//!   lost; the client has seen a call whose arguments are not valid JSON;
//! - the reply ending before the object closes (`max_tokens`, a stop string): the call
//!   stays, cut short with the arguments so far ([`ToolStream::cut_short`]), as OpenAI's
//!   API shows a call the token limit cut; its text is not repeated as content.
//!
//! In both, [`crate::parse()`] on the same text reports no call. A server builds a whole
//! reply from the merged events of a stream over it, so that streamed and whole replies
//! agree everywhere, and finishes with `tool_calls` only when no call was cut short.
//! Everywhere else the merged events equal the complete parse.

use crate::ids::CallIds;
use crate::syntax::ToolSyntax;

mod hermes;
mod llama3;
mod pending;

/// One piece of a streamed reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEvent {
    /// Text for the message's `content`.
    Content(String),
    /// A new call: `tool_calls[index]` with its `id` and `function.name`.
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// The next piece of `tool_calls[index].function.arguments`.
    CallArgs { index: usize, fragment: String },
}

/// Parses a reply as it is generated. One stream per reply.
#[derive(Clone, Debug)]
pub struct ToolStream {
    syntax: ToolSyntax,
    machine: Machine,
    out: Out,
}

#[derive(Clone, Debug)]
enum Machine {
    Hermes(hermes::Hermes),
    Llama3(llama3::Llama3),
}

impl Machine {
    fn new(syntax: ToolSyntax) -> Machine {
        match syntax {
            ToolSyntax::Hermes => Machine::Hermes(hermes::Hermes::new()),
            ToolSyntax::Llama3Json => Machine::Llama3(llama3::Llama3::new()),
        }
    }
}

impl ToolStream {
    /// A stream with fresh call ids.
    pub fn new(syntax: ToolSyntax) -> ToolStream {
        ToolStream::with_ids(syntax, CallIds::new())
    }

    /// A stream with the caller's id source: with the same [`CallIds::seeded`] seed, a
    /// stream and [`crate::parse_with_ids`] give the same ids.
    pub fn with_ids(syntax: ToolSyntax, ids: CallIds) -> ToolStream {
        ToolStream {
            syntax,
            machine: Machine::new(syntax),
            out: Out {
                events: Vec::new(),
                calls: 0,
                cut: false,
                ids,
            },
        }
    }

    /// The syntax parsed.
    pub fn syntax(&self) -> ToolSyntax {
        self.syntax
    }

    /// Feeds the next piece of the reply; returns what it decided, in reply order
    /// (adjacent pieces of the same kind merged).
    pub fn push(&mut self, delta: &str) -> Vec<StreamEvent> {
        for c in delta.chars() {
            match &mut self.machine {
                Machine::Hermes(m) => m.push(c, &mut self.out),
                Machine::Llama3(m) => m.push(c, &mut self.out),
            }
        }
        std::mem::take(&mut self.out.events)
    }

    /// Ends the reply: what was held back comes out, as content unless it completes
    /// nothing (whitespace next to a call) or belongs to an announced call the end cut
    /// short ([`ToolStream::cut_short`]). Text pushed afterwards starts a new reply;
    /// call indices go on.
    pub fn finish(&mut self) -> Vec<StreamEvent> {
        self.out.cut = false;
        match &mut self.machine {
            Machine::Hermes(m) => m.finish(&mut self.out),
            Machine::Llama3(m) => m.finish(&mut self.out),
        }
        self.machine = Machine::new(self.syntax);
        std::mem::take(&mut self.out.events)
    }

    /// How many calls have been announced ([`StreamEvent::CallStart`]) so far.
    pub fn calls_started(&self) -> usize {
        self.out.calls
    }

    /// Whether the reply last finished ended inside an announced call, whose arguments
    /// are then not a whole JSON object.
    pub fn cut_short(&self) -> bool {
        self.out.cut
    }
}

/// Where the machines put their events.
#[derive(Clone, Debug)]
pub(crate) struct Out {
    events: Vec<StreamEvent>,
    calls: usize,
    /// The reply last finished ended inside an announced call.
    pub(crate) cut: bool,
    ids: CallIds,
}

impl Out {
    pub(crate) fn content(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        match self.events.last_mut() {
            Some(StreamEvent::Content(c)) => c.push_str(s),
            _ => self.events.push(StreamEvent::Content(s.to_string())),
        }
    }

    pub(crate) fn content_char(&mut self, c: char) {
        self.content(c.encode_utf8(&mut [0; 4]));
    }

    /// Announces a call; returns its index.
    pub(crate) fn start(&mut self, name: &str) -> usize {
        let index = self.calls;
        self.calls += 1;
        self.events.push(StreamEvent::CallStart {
            index,
            id: self.ids.next_id(),
            name: name.to_string(),
        });
        index
    }

    pub(crate) fn args(&mut self, index: usize, s: &str) {
        if s.is_empty() {
            return;
        }
        match self.events.last_mut() {
            Some(StreamEvent::CallArgs { index: i, fragment }) if *i == index => {
                fragment.push_str(s)
            }
            _ => self.events.push(StreamEvent::CallArgs {
                index,
                fragment: s.to_string(),
            }),
        }
    }
}
