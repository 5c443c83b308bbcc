//! The output side: detokenization, stop strings and every request's events, on a
//! thread of their own (`inferd-output`) so that the engine thread only schedules,
//! runs passes and samples.
//!
//! The engine opens a request's [`OutStream`] when it accepts the request, and from
//! then on every event of that request goes through here, in order: the tokens each
//! step drew ([`Sampled`] with what the engine decided the token does: end of
//! sequence, grammar complete, length), errors and refusals. A stop string is found
//! here; the reply then ends at once for the client (tokens drawn after it are never
//! shown nor counted), and the engine is told ([`Msg::Ended`], through its inbox like a
//! cancel) so that it frees the request's KV at its next step and parks exactly the
//! tokens the client got.

use std::collections::HashMap;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use inferd_core::sampling::Sampled;
use inferd_text::{IncrementalDecoder, Tokenizer};
use tokio::sync::mpsc::UnboundedSender;

use crate::handle::{Msg, Shared};
use crate::request::{Delta, Event, FinishReason, SubmitError, TokenOut, Usage};
use crate::stop::{StopMatcher, StopStep};

/// How the engine ended a reply with a token (or `None`: it goes on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EngineEnd {
    /// An end-of-sequence id (the tokenizer's, or the grammar's end): its own text is
    /// not shown.
    Eos,
    /// The grammar is complete: this token's text is the reply's last.
    Complete,
    /// `max_tokens` or the context limit.
    Length,
}

/// One drawn token of one request.
pub(crate) struct TokenMsg {
    pub id: u64,
    pub sampled: Sampled,
    pub end: Option<EngineEnd>,
    /// Leading prompt tokens whose KV came from the cache (the usage reports it).
    pub cached: usize,
}

pub(crate) enum OutMsg {
    /// A request's stream, from its acceptance on.
    Open(u64, Box<OutStream>),
    /// The tokens of one step.
    Tokens(Vec<TokenMsg>),
    /// The engine ended the reply between tokens (no room left beside the pinned
    /// contexts: see `admit.rs`), by length; the prompt tokens that came from the cache.
    End(u64, usize),
    /// The request failed: its stream ends with this error.
    Error(u64, String),
    /// The request was refused before it ran (the queue timeout).
    Reject(u64, SubmitError),
    /// The engine forgot the request (ended, cancelled): its stream state goes.
    Close(u64),
}

/// One request's output state.
pub(crate) struct OutStream {
    tx: UnboundedSender<Event>,
    detok: IncrementalDecoder<Arc<Tokenizer>>,
    stop: StopMatcher,
    /// Tokens not sent yet (their text incomplete UTF-8 or a possible stop string), each
    /// with where its text begins in the reply's text (bytes).
    pending: Vec<(usize, TokenOut)>,
    /// Bytes of text the detokenizer gave so far, and bytes sent to the client.
    decoded: usize,
    shown: usize,
    prompt_len: usize,
    /// Tokens this stream took (the reply's tokens so far).
    generated: usize,
    /// Whether the engine waits to hear how the reply ended (a session is parked with
    /// exactly the reply's tokens): told for every end, not just stop strings.
    confirm: bool,
}

impl OutStream {
    pub fn new(
        tx: UnboundedSender<Event>,
        tokenizer: Arc<Tokenizer>,
        stops: &[String],
        prompt_len: usize,
    ) -> Self {
        let stop = StopMatcher::new(stops);
        OutStream {
            tx,
            detok: IncrementalDecoder::new(tokenizer, true),
            confirm: false,
            stop,
            pending: Vec::new(),
            decoded: 0,
            shown: 0,
            prompt_len,
            generated: 0,
        }
    }

    /// Tells the engine how the reply ended, however it ended (see
    /// [`crate::seq::Seq::confirms_end`]).
    pub fn confirming(mut self, confirm: bool) -> Self {
        self.confirm = confirm;
        self
    }

    /// Cached prompt tokens as reported: at most the prompt.
    fn cached(&self, cached: usize) -> usize {
        cached.min(self.prompt_len)
    }

    fn usage(&self, cached: usize) -> Usage {
        Usage {
            prompt_tokens: self.prompt_len,
            completion_tokens: self.generated,
            cached_tokens: self.cached(cached),
        }
    }

    /// Takes one drawn token; `Some` when the reply ended with it: whether a stop
    /// string ended it, and the reply's last events (to send once the engine is told).
    /// The tokens a delta carries (`return_token_ids`, logprobs) are those whose text the
    /// reply holds: not an end-of-sequence id, nor the tokens of the stop string that
    /// ended it (all counted in the usage).
    fn take(&mut self, t: TokenMsg) -> Option<(bool, Vec<Event>)> {
        self.generated += 1;
        if t.end == Some(EngineEnd::Eos) {
            // End of sequence: its own text is not shown.
            return Some(self.end(FinishReason::Stop, t.cached));
        }
        self.pending.push((
            self.decoded,
            TokenOut {
                id: t.sampled.token,
                logprob: t.sampled.logprob,
                top_logprobs: t.sampled.top_logprobs,
            },
        ));
        let text = self.detok.push(t.sampled.token).unwrap_or_default();
        self.decoded += text.len();
        match self.stop.push(&text) {
            StopStep::Stopped(text) => {
                return Some((true, self.finish(text, FinishReason::Stop, t.cached)));
            }
            StopStep::Emit(text) if !text.is_empty() => {
                let tokens = self.shown_tokens(text.len());
                let _ = self.tx.send(Event::Delta(Delta {
                    text,
                    tokens,
                    cached_tokens: self.cached(t.cached),
                }));
            }
            StopStep::Emit(_) => {}
        }
        let reason = match t.end? {
            EngineEnd::Length => FinishReason::Length,
            _ => FinishReason::Stop,
        };
        Some(self.end(reason, t.cached))
    }

    /// The reply ends after the tokens it was sent, for `reason` unless the text still
    /// held completes a stop string: whether one did, and the reply's last events.
    fn end(&mut self, reason: FinishReason, cached: usize) -> (bool, Vec<Event>) {
        let (tail, stopped) = self.flush_tail();
        let reason = if stopped { FinishReason::Stop } else { reason };
        (stopped, self.finish(tail, reason, cached))
    }

    /// Text still held by the detokenizer and the stop matcher when generation ends, and
    /// whether that last text completed a stop string.
    fn flush_tail(&mut self) -> (String, bool) {
        let tail = self.detok.finish().unwrap_or_default();
        self.decoded += tail.len();
        match self.stop.push(&tail) {
            StopStep::Stopped(t) => (t, true),
            StopStep::Emit(mut t) => {
                t.push_str(&self.stop.flush());
                (t, false)
            }
        }
    }

    /// `bytes` more of the reply's text go to the client: the pending tokens whose text
    /// begins inside what it has then (a token of an incomplete character goes with the
    /// character). The others stay pending: their text is held back (a possible stop).
    fn shown_tokens(&mut self, bytes: usize) -> Vec<TokenOut> {
        self.shown += bytes;
        let n = self.pending.partition_point(|(at, _)| *at < self.shown);
        self.pending.drain(..n).map(|(_, t)| t).collect()
    }

    /// The reply's last events: the text left (or logprobs of tokens without text),
    /// then `Done`. Tokens past the reply's text (a stop string's) are dropped.
    fn finish(&mut self, text: String, reason: FinishReason, cached: usize) -> Vec<Event> {
        let mut tokens = self.shown_tokens(text.len());
        let rest = std::mem::take(&mut self.pending);
        if self.stop.matched().is_none() {
            // Ended otherwise, the reply holds every token's text (flushed).
            tokens.extend(rest.into_iter().map(|(_, t)| t));
        }
        let mut last = Vec::with_capacity(2);
        if !text.is_empty() || tokens.iter().any(|t| t.logprob.is_some()) {
            last.push(Event::Delta(Delta {
                text,
                tokens,
                cached_tokens: self.cached(cached),
            }));
        }
        last.push(Event::Done {
            finish_reason: reason,
            usage: self.usage(cached),
            stop: self.stop.matched().map(str::to_string),
        });
        last
    }
}

/// The engine's end of the output thread; dropping it lets the thread finish what it
/// was sent and waits for it, so every event is out when the engine has stopped.
pub(crate) struct Output {
    tx: Option<mpsc::Sender<OutMsg>>,
    thread: Option<JoinHandle<()>>,
}

impl Output {
    /// Starts the output thread; it tells the engine of replies it ended through
    /// `shared`'s inbox.
    pub fn start(shared: Arc<Shared>) -> std::io::Result<Output> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("inferd-output".into())
            .spawn(move || run(rx, shared))?;
        Ok(Output {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    pub fn send(&self, m: OutMsg) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(m);
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(rx: mpsc::Receiver<OutMsg>, shared: Arc<Shared>) {
    let mut streams: HashMap<u64, OutStream> = HashMap::new();
    let tell = |m: Msg| {
        let _ = shared
            .inbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(m);
    };
    while let Ok(m) = rx.recv() {
        match m {
            OutMsg::Open(id, s) => {
                streams.insert(id, *s);
            }
            OutMsg::Tokens(tokens) => {
                for t in tokens {
                    let id = t.id;
                    let Some(s) = streams.get_mut(&id) else {
                        continue; // ended here already: tokens past its end are dropped
                    };
                    // A fault in one stream's text (detokenizing, stop strings) ends that
                    // stream with an error; the thread serves every other one.
                    let taken =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.take(t)));
                    let Ok(taken) = taken else {
                        if let Some(s) = streams.remove(&id) {
                            let _ = s.tx.send(Event::Error(
                                "internal error while formatting the reply's text".into(),
                            ));
                        }
                        continue;
                    };
                    let Some((by_stop, last)) = taken else {
                        continue;
                    };
                    let s = streams.remove(&id).expect("present");
                    deliver(id, s, by_stop, last, &tell);
                }
            }
            OutMsg::End(id, cached) => {
                if let Some(mut s) = streams.remove(&id) {
                    let (by_stop, last) = s.end(FinishReason::Length, cached);
                    deliver(id, s, by_stop, last, &tell);
                }
            }
            OutMsg::Error(id, msg) => {
                if let Some(s) = streams.remove(&id) {
                    let _ = s.tx.send(Event::Error(msg));
                }
            }
            OutMsg::Reject(id, e) => {
                if let Some(s) = streams.remove(&id) {
                    let _ = s.tx.send(Event::Rejected(e));
                }
            }
            OutMsg::Close(id) => {
                streams.remove(&id);
            }
        }
    }
}

/// An ended reply's last events out to its client, after the engine is told how it
/// ended where it waits to hear (`confirm`, or a stop string).
fn deliver(id: u64, s: OutStream, by_stop: bool, last: Vec<Event>, tell: &impl Fn(Msg)) {
    if s.confirm || by_stop {
        // Into the inbox before the client sees `Done`: the client's next request (a
        // session's next turn) comes after it.
        tell(Msg::Ended {
            id,
            generated: s.generated,
            by_stop,
        });
    }
    for ev in last {
        let _ = s.tx.send(ev);
    }
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
