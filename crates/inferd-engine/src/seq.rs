//! One request's state inside the engine: its tokens, sampler, detokenizer, stop
//! matcher and the stream its events go to.

use std::sync::Arc;
use std::time::Instant;

use inferd_core::sampling::{Sampled, SamplingParams};
use inferd_grammar::{Constraint, GrammarError, TokenMask};
use inferd_text::{IncrementalDecoder, Tokenizer};
use tokio::sync::mpsc::UnboundedSender;

use crate::handle::Reply;
use crate::memory::ContextInfo;
use crate::request::{CacheMode, Delta, Event, FinishReason, GenRequest, TokenOut, Usage};
use crate::runner::Draw;
use crate::stats::names;
use crate::stop::{StopMatcher, StopStep};

pub(crate) struct Seq {
    /// Prompt then generated tokens.  // [prompt_len + generated]
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    max_tokens: usize,
    /// Longest the sequence may get (prompt + generated).
    max_len: usize,
    stop_ids: Vec<u32>,
    /// Its sampling parameters until its first admission, when they go to the runner's
    /// row (which keeps the sampler across preemptions).
    pub sampling: Option<SamplingParams>,
    detok: IncrementalDecoder<Arc<Tokenizer>>,
    stop: StopMatcher,
    /// Tokens whose text is still held back (incomplete UTF-8 or a possible stop string).
    pending: Vec<TokenOut>,
    tx: UnboundedSender<Event>,
    arrived: Instant,
    last_token: Option<Instant>,
    /// Leading prompt tokens whose KV came from the cache at (the last) admission.
    pub cached: usize,
    /// Admitted at least once (a preempted sequence waits again, but is not new).
    pub admitted: bool,
    /// Park the KV under this session when the turn ends.
    pub session: Option<String>,
    /// `cache: drop`: never registered in the prefix cache, never parked.
    pub no_trace: bool,
    /// Set when this sequence only prefills a context.
    pub build: Option<Build>,
    /// The grammar the reply is held to.
    pub constraint: Option<Constraint>,
    /// The tokens allowed at this step, computed beside the forward pass.
    pub mask: Option<Result<TokenMask, GrammarError>>,
    /// Under a constraint: the ids that end the reply (the grammar allows them only
    /// where it may end, `ignore_eos` or not).
    grammar_eos: Vec<u32>,
}

/// A context being prefilled: where it goes when its KV is computed.
pub(crate) struct Build {
    pub id: String,
    pub pin: bool,
    pub meta: String,
    pub reply: Reply<ContextInfo>,
}

/// What happened to a sequence after a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Continue,
    Finished,
    /// The client is gone (its stream was dropped).
    Disconnected,
}

impl Seq {
    pub fn new(
        req: GenRequest,
        tokenizer: Arc<Tokenizer>,
        max_context: usize,
        tx: UnboundedSender<Event>,
    ) -> Self {
        let grammar_eos = if req.constraint.is_some() {
            tokenizer.stop_ids().to_vec()
        } else {
            Vec::new()
        };
        let stop_ids = if req.ignore_eos {
            Vec::new()
        } else {
            tokenizer.stop_ids().to_vec()
        };
        Seq {
            prompt_len: req.prompt.len(),
            max_tokens: req.max_tokens,
            max_len: max_context.min(req.max_context.unwrap_or(usize::MAX)),
            cached: 0,
            admitted: false,
            session: req.session,
            no_trace: req.cache == CacheMode::Drop,
            build: None,
            constraint: req.constraint,
            mask: None,
            grammar_eos,
            tokens: req.prompt,
            stop_ids,
            sampling: Some(req.sampling),
            detok: IncrementalDecoder::new(tokenizer, true),
            stop: StopMatcher::new(&req.stop),
            pending: Vec::new(),
            tx,
            arrived: Instant::now(),
            last_token: None,
        }
    }

    /// Time since the request arrived.
    pub fn waited(&self) -> std::time::Duration {
        self.arrived.elapsed()
    }

    pub fn generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_len,
            completion_tokens: self.generated(),
            cached_tokens: self.cached.min(self.prompt_len),
        }
    }

    /// Computes this step's mask (a constrained sequence only). Runs on the mask
    /// thread while the forward pass runs.
    pub fn prepare_mask(&mut self) {
        if let Some(c) = &mut self.constraint {
            self.mask = Some(c.mask());
        }
    }

    /// This step's grammar mask (computed now if the mask thread did not), or why the
    /// constraint failed; `None` when unconstrained.
    pub fn take_mask(&mut self) -> Result<Option<TokenMask>, GrammarError> {
        if self.constraint.is_some() && self.mask.is_none() {
            self.prepare_mask();
        }
        self.mask.take().transpose()
    }

    /// What the runner needs to draw this sequence's next token: its history and this
    /// step's `mask`.
    pub fn draw(&self, id: u64, mask: Option<TokenMask>) -> Draw<'_> {
        let (prompt, generated) = self.tokens.split_at(self.prompt_len);
        Draw {
            seq: id,
            prompt,
            generated,
            mask,
        }
    }

    /// The constraint failed: the client gets an error and the sequence ends.
    pub fn fail(&mut self, e: GrammarError) -> Outcome {
        self.send(Event::Error(e.to_string()));
        Outcome::Finished
    }

    /// Handles the token drawn for this sequence: stop ids, the grammar, stop strings,
    /// detokenized text to the stream, limits.
    pub fn accept(&mut self, s: Sampled) -> Outcome {
        let now = Instant::now();
        match self.last_token {
            None => metrics::histogram!(names::TTFT).record((now - self.arrived).as_secs_f64()),
            Some(t) => metrics::histogram!(names::ITL).record((now - t).as_secs_f64()),
        }
        self.last_token = Some(now);
        metrics::counter!(names::GENERATED_TOKENS).increment(1);
        self.tokens.push(s.token);
        self.pending.push(TokenOut {
            id: s.token,
            logprob: s.logprob,
            top_logprobs: s.top_logprobs,
        });
        let mut grammar_done = false;
        if let Some(c) = &mut self.constraint {
            if self.grammar_eos.contains(&s.token) {
                // The grammar allowed the end here.
                let (tail, _) = self.flush_tail();
                return self.finish(tail, FinishReason::Stop);
            }
            if let Err(e) = c.commit(s.token) {
                return self.fail(e);
            }
            grammar_done = c.is_finished();
        }
        if self.stop_ids.contains(&s.token) {
            // End of sequence: its own text is not shown.
            let (tail, _) = self.flush_tail();
            return self.finish(tail, FinishReason::Stop);
        }
        let text = self.detok.push(s.token).unwrap_or_default();
        match self.stop.push(&text) {
            StopStep::Stopped(t) => return self.finish(t, FinishReason::Stop),
            StopStep::Emit(t) if !t.is_empty() => {
                let tokens = std::mem::take(&mut self.pending);
                if !self.send(Event::Delta(Delta { text: t, tokens })) {
                    return Outcome::Disconnected;
                }
            }
            StopStep::Emit(_) => {}
        }
        if grammar_done {
            // Complete: nothing but the end may follow, so the reply ends here.
            let (tail, _) = self.flush_tail();
            return self.finish(tail, FinishReason::Stop);
        }
        if self.generated() >= self.max_tokens || self.tokens.len() >= self.max_len {
            let (tail, stopped) = self.flush_tail();
            let reason = if stopped {
                FinishReason::Stop
            } else {
                FinishReason::Length
            };
            return self.finish(tail, reason);
        }
        if self.tx.is_closed() {
            return Outcome::Disconnected;
        }
        Outcome::Continue
    }

    /// Text still held by the detokenizer and the stop matcher when generation ends, and
    /// whether that last text completed a stop string.
    fn flush_tail(&mut self) -> (String, bool) {
        let tail = self.detok.finish().unwrap_or_default();
        match self.stop.push(&tail) {
            StopStep::Stopped(t) => (t, true),
            StopStep::Emit(mut t) => {
                t.push_str(&self.stop.flush());
                (t, false)
            }
        }
    }

    fn finish(&mut self, text: String, reason: FinishReason) -> Outcome {
        let tokens = std::mem::take(&mut self.pending);
        if !text.is_empty() || tokens.iter().any(|t| t.logprob.is_some()) {
            self.send(Event::Delta(Delta { text, tokens }));
        }
        self.send(Event::Done {
            finish_reason: reason,
            usage: self.usage(),
            stop: self.stop.matched().map(str::to_string),
        });
        Outcome::Finished
    }

    /// Sends an event; `false` when the client is gone.
    pub fn send(&self, ev: Event) -> bool {
        self.tx.send(ev).is_ok()
    }
}
