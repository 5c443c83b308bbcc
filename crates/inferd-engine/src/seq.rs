//! One request's record inside the engine: its tokens, limits, grammar, where its KV
//! goes, and the scheduler's part of it ([`SeqState`]: the scheduler reads the engine's
//! records, it keeps none). What the client sees (text, stop strings, events) is the
//! output side's ([`crate::output`]); the sampler is the runner's row's.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Instant;

use inferd_core::sampling::SamplingParams;
use inferd_core::sched::{SeqState, SeqStore};
use inferd_core::spec::{Backoff, DraftLength, NgramDrafter, SpecConfig};
use inferd_grammar::{Constraint, GrammarError, TokenMask};
use inferd_text::Tokenizer;
use tokio::sync::mpsc::UnboundedSender;

use crate::handle::Reply;
use crate::memory::ContextInfo;
use crate::output::EngineEnd;
use crate::request::{CacheMode, Event, GenRequest};
use crate::runner::Draw;
use crate::stats::names;

pub(crate) struct Seq {
    /// Prompt then generated tokens (the only copy).  // [prompt_len + generated]
    pub tokens: Vec<u32>,
    /// The scheduler's part (priority, arrival, tokens counted and computed).
    pub sched: SeqState,
    pub prompt_len: usize,
    max_tokens: usize,
    /// Longest the sequence may get (prompt + generated).
    max_len: usize,
    stop_ids: Vec<u32>,
    /// Whether it has stop strings (the output side may end it before the engine does).
    stops: bool,
    /// Its sampling parameters until its first admission, when they go to the runner's
    /// row (which keeps the sampler across preemptions).
    pub sampling: Option<SamplingParams>,
    /// Its stream, only to notice a client that is gone: events go through the output
    /// side, in order.
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
    /// Its draft for the next decode (speculative decoding), cut to what the grammar
    /// allows and the scheduler gave room to; the tokens the model checks after its
    /// last token.
    pub draft: Vec<u32>,
    /// Its draft came from the draft model (else it is a copy).
    pub draft_by_model: bool,
    /// Under a constraint: the masks of the draft's positions (after its first 1, 2, ..
    /// tokens), computed with this step's mask; fewer than the draft where the reply
    /// cannot go on, and then the draws past them are not taken.
    pub draft_masks: Vec<TokenMask>,
    /// Where its copy drafts come from: its tokens' n-gram index, grown as they are.
    drafter: NgramDrafter,
    /// How long its next draft may be, from how its last one fared.
    draft_len: DraftLength,
    /// With a draft model: when it asks it next (fewer asks while its guesses miss).
    pub model_backoff: Backoff,
}

/// A context being prefilled: where it goes when its KV is computed.
pub(crate) struct Build {
    pub id: String,
    pub pin: bool,
    pub meta: String,
    pub reply: Reply<ContextInfo>,
}

/// What a drawn token does to the sequence, as far as the engine can tell (stop strings
/// are the output side's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Continue,
    /// The reply ends with this token.
    End(EngineEnd),
    /// The grammar refused the token: the reply ends with this error.
    Failed(String),
    /// The client is gone (its stream was dropped).
    Disconnected,
}

/// The most tokens a request's sequence may hold: the server's context, or the
/// request's own if smaller.
pub(crate) fn max_len(req: &GenRequest, max_context: usize) -> usize {
    max_context.min(req.max_context.unwrap_or(usize::MAX))
}

/// The most tokens (prompt and drawn) a request's sequence reaches before it ends by
/// length ([`Seq`]'s check after each token: `max_tokens` drawn, or the context full):
/// the scheduler's `token_limit`.
pub fn token_limit(req: &GenRequest, max_context: usize) -> usize {
    req.prompt
        .len()
        .saturating_add(req.max_tokens)
        .min(max_len(req, max_context))
}

impl Seq {
    pub fn new(
        req: GenRequest,
        tokenizer: Arc<Tokenizer>,
        max_context: usize,
        tx: UnboundedSender<Event>,
        sched: SeqState,
        arrived: Instant,
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
            draft: Vec::new(),
            draft_by_model: false,
            draft_masks: Vec::new(),
            drafter: NgramDrafter::default(),
            draft_len: DraftLength::default(),
            model_backoff: Backoff::default(),
            sched,
            prompt_len: req.prompt.len(),
            max_tokens: req.max_tokens,
            max_len: max_len(&req, max_context),
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
            stops: req.stop.iter().any(|s| !s.is_empty()),
            sampling: Some(req.sampling),
            tx,
            arrived,
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

    /// The session this turn parks under, if any (not with `cache: drop`).
    pub fn parks_under(&self) -> Option<&str> {
        self.session.as_deref().filter(|_| !self.no_trace)
    }

    /// Whether the engine must hear from the output side how the reply ended: a stop
    /// string may cut it short of what the engine drew, and its session must park only
    /// what the client got.
    pub fn confirms_end(&self) -> bool {
        self.stops && self.parks_under().is_some()
    }

    /// The entry `Engine::ended_turns` keeps for it when it ends, where its output side
    /// says how many tokens the client got: (session, prompt length).
    pub fn ended_turn(&self) -> Option<(String, usize)> {
        self.confirms_end().then(|| {
            (
                self.parks_under().unwrap_or_default().to_string(),
                self.prompt_len,
            )
        })
    }

    /// Computes this step's mask (a constrained sequence only), and its draft's
    /// positions' masks. Runs on the mask thread while the forward pass runs.
    pub fn prepare_mask(&mut self) {
        if let Some(c) = &mut self.constraint {
            self.mask = Some(c.mask());
            self.draft_masks = if self.draft.is_empty() {
                Vec::new()
            } else {
                c.draft_masks(&self.draft)
            };
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
    /// step's `mask` (and its draft with its positions' masks, when it decodes
    /// speculatively).
    pub fn draw(&self, id: u64, mask: Option<TokenMask>) -> Draw<'_> {
        let (prompt, generated) = self.tokens.split_at(self.prompt_len);
        Draw {
            seq: id,
            prompt,
            generated,
            mask,
            drafts: &self.draft,
            draft_masks: &self.draft_masks,
        }
    }

    /// How many of a drafted step's draws may be taken: all (`1 + draft`) unless the
    /// grammar could not go on past some draft position (its mask was not made).
    pub fn usable_draws(&self) -> usize {
        if self.constraint.is_some() && !self.draft.is_empty() {
            1 + self.draft_masks.len()
        } else {
            1 + self.draft.len()
        }
    }

    /// Whether tokens of its own wait to be read before it decodes: a prompt not yet
    /// (or not wholly) prefilled, or a recompute after preemption.
    pub fn prompt_waits(&self) -> bool {
        self.sched.num_computed() + 1 < self.sched.num_tokens()
    }

    /// Whether it may decode speculatively (not a context's build).
    pub fn may_draft(&self) -> bool {
        self.build.is_none()
    }

    /// The model drew `accepted` of its last draft's `drafted` tokens (its next drafts'
    /// length follows).
    pub fn draft_taken(&mut self, cfg: &SpecConfig, drafted: usize, accepted: usize) {
        self.draft_len.feedback(cfg, drafted, accepted);
        if self.draft_by_model {
            if accepted > 0 {
                self.model_backoff.taken();
            } else {
                self.model_backoff.missed();
            }
        }
    }

    /// The most draft tokens it may propose for the next step: none when it does not
    /// decode next or may not draft; else its draft length ([`DraftLength`]), and none
    /// past its limits (the token drawn first comes before them).
    pub fn draft_room(&self, cfg: &SpecConfig) -> usize {
        let decodes = self.admitted
            && self.sched.num_tokens() == self.tokens.len()
            && self.sched.num_computed() + 1 == self.tokens.len()
            && self.tokens.len() > self.prompt_len;
        if !self.may_draft() || !decodes {
            return 0;
        }
        let room = (self.max_tokens.saturating_sub(self.generated()))
            .min(self.max_len.saturating_sub(self.tokens.len()))
            .saturating_sub(1);
        self.draft_len.get(cfg).min(room)
    }

    /// Proposes its copy draft for the next step (empty when it may draft none, or its
    /// tokens hold no earlier match), and returns how long a draft it may have
    /// ([`Seq::draft_room`]).
    pub fn propose_draft(&mut self, cfg: &SpecConfig) -> usize {
        let max = self.draft_room(cfg);
        let draft = if max > 0 {
            self.drafter.propose(cfg, &self.tokens, max)
        } else {
            Vec::new()
        };
        self.set_draft(draft, false);
        max
    }

    /// Takes `draft` (the draft model's, or a copy) as its draft for the next step, cut
    /// before an end of the reply and to what its grammar allows.
    pub fn set_draft(&mut self, draft: Vec<u32>, by_model: bool) {
        self.draft = draft;
        self.draft_by_model = by_model;
        if let Some(c) = &mut self.constraint {
            // No draft past the end of the reply, nor past what the grammar allows.
            if let Some(end) = self.draft.iter().position(|t| self.grammar_eos.contains(t)) {
                self.draft.truncate(end);
            }
            let valid = c.valid_prefix(&self.draft);
            self.draft.truncate(valid);
        }
    }

    /// Takes the token drawn for this sequence: end of sequence ids, the grammar,
    /// limits, a client gone.
    pub fn accept(&mut self, token: u32) -> Verdict {
        let now = Instant::now();
        match self.last_token {
            None => metrics::histogram!(names::TTFT).record((now - self.arrived).as_secs_f64()),
            Some(t) => metrics::histogram!(names::ITL).record((now - t).as_secs_f64()),
        }
        self.last_token = Some(now);
        metrics::counter!(names::GENERATED_TOKENS).increment(1);
        self.tokens.push(token);
        let mut complete = false;
        if let Some(c) = &mut self.constraint {
            if self.grammar_eos.contains(&token) {
                // The grammar allowed the end here.
                return Verdict::End(EngineEnd::Eos);
            }
            if let Err(e) = c.commit(token) {
                return Verdict::Failed(e.to_string());
            }
            complete = c.is_finished();
        }
        if self.stop_ids.contains(&token) {
            return Verdict::End(EngineEnd::Eos);
        }
        if complete {
            // Complete: nothing but the end may follow, so the reply ends here.
            return Verdict::End(EngineEnd::Complete);
        }
        if self.generated() >= self.max_tokens || self.tokens.len() >= self.max_len {
            return Verdict::End(EngineEnd::Length);
        }
        if self.tx.is_closed() {
            return Verdict::Disconnected;
        }
        Verdict::Continue
    }
}

/// The engine's request records by id: one record per request.
#[derive(Default)]
pub(crate) struct Seqs(HashMap<u64, Seq>);

impl Deref for Seqs {
    type Target = HashMap<u64, Seq>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Seqs {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// The scheduler reads and updates its part of each record, and a waiting request's
/// tokens for prefix sharing.
impl SeqStore for Seqs {
    fn state(&self, id: u64) -> Option<&SeqState> {
        self.0.get(&id).map(|s| &s.sched)
    }

    fn state_mut(&mut self, id: u64) -> Option<&mut SeqState> {
        self.0.get_mut(&id).map(|s| &mut s.sched)
    }

    fn tokens(&self, id: u64) -> &[u32] {
        self.0.get(&id).map_or(&[], |s| s.tokens.as_slice())
    }

    fn draft_len(&self, id: u64) -> usize {
        self.0.get(&id).map_or(0, |s| s.draft.len())
    }
}
