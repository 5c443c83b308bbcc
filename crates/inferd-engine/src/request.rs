//! The typed contract between the engine and its callers (the HTTP server, tests):
//! what a request asks for, and the events its stream yields.

use inferd_core::sampling::SamplingParams;
use inferd_grammar::Constraint;

/// One generation request, already tokenized.
#[derive(Clone, Debug)]
pub struct GenRequest {
    /// Prompt token ids (chat template already applied).  // [prompt_len]
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    /// Most tokens to generate; generation also ends at the model context.
    pub max_tokens: usize,
    /// Stop strings: matched on the detokenized text, across token boundaries; the
    /// matched string and anything after it are never emitted.
    pub stop: Vec<String>,
    /// Keep generating past the tokenizer's end-of-sequence ids.
    pub ignore_eos: bool,
    /// Higher runs first; ties go to the oldest.
    pub priority: i32,
    /// Whether this request's KV may stay behind for others (the prefix cache).
    pub cache: CacheMode,
    /// A context (see [`crate::ContextSpec`]) this prompt continues: its blocks are
    /// shared, its partly filled last block copied.
    pub context: Option<String>,
    /// After this turn the sequence's KV (prompt and reply) is parked under this id,
    /// and the next turn with the same id starts from it.
    pub session: Option<String>,
    /// Longest this sequence may get (prompt + generated), below the model's limit.
    pub max_context: Option<usize>,
    /// Holds the reply to a grammar (a JSON Schema, tool calls): only tokens it allows
    /// are sampled, end of sequence only where it may end, and the reply ends when it
    /// is complete. Built by [`crate::EngineHandle::grammars`].
    pub constraint: Option<Constraint>,
}

/// What a request leaves in the KV cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// Its full blocks enter the prefix cache; with a session its KV is parked.
    #[default]
    Default,
    /// No trace: it may read cached prefixes, but its own blocks are freed at the
    /// end and never enter the prefix cache (nor a session).
    Drop,
}

impl GenRequest {
    /// A greedy request with defaults (used by tests and warm-up).
    pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Self {
        GenRequest {
            prompt,
            sampling: SamplingParams::greedy(),
            max_tokens,
            stop: Vec::new(),
            ignore_eos: false,
            priority: 0,
            cache: CacheMode::Default,
            context: None,
            session: None,
            max_context: None,
            constraint: None,
        }
    }
}

/// A generated token with the logprobs asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenOut {
    pub id: u32,
    /// Log-probability of `id`; `Some` iff the request asked for logprobs.
    pub logprob: Option<f32>,
    /// The most likely alternatives, most likely first.
    pub top_logprobs: Vec<(u32, f32)>,
}

/// Text that became final, with the tokens that produced it.
#[derive(Clone, Debug, PartialEq)]
pub struct Delta {
    /// Valid UTF-8, never part of a stop string.
    pub text: String,
    pub tokens: Vec<TokenOut>,
    /// Leading prompt tokens whose KV came from the cache so far (what `Done`'s usage
    /// reports), so a protocol that states usage when it opens can state it then.
    pub cached_tokens: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens` or the context limit.
    Length,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens whose KV came from the cache instead of being computed.
    pub cached_tokens: usize,
}

/// What a request's stream yields: deltas, then exactly one `Done` or `Error`.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Delta(Delta),
    Done {
        finish_reason: FinishReason,
        usage: Usage,
        /// The stop string that ended the reply (`finish_reason` is then `Stop`).
        stop: Option<String>,
    },
    /// The request failed inside the engine (not the caller's fault).
    Error(String),
    /// The engine refused the request before generating anything: it could never be
    /// admitted, or it waited in the queue too long. Always the first and only event.
    Rejected(SubmitError),
}

/// Why a request was not accepted.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SubmitError {
    #[error("the request queue is full ({queued} waiting); retry later")]
    QueueFull { queued: usize, retry_after_s: u32 },
    #[error("{what} ({tokens} tokens) exceeds the limit of {limit} tokens")]
    TooLong {
        what: &'static str,
        tokens: usize,
        limit: usize,
    },
    /// About the prompt.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// About the request field `param` (its name as the APIs spell it).
    #[error("invalid request: {message}")]
    InvalidParam {
        param: &'static str,
        message: String,
    },
    #[error("{0}")]
    NotFound(String),
    /// The prompt fits the pool, but not beside what pinned contexts hold: it could only
    /// run once contexts are unpinned.
    #[error(
        "the prompt ({tokens} tokens) needs {need_blocks} KV blocks, but pinned contexts hold \
         {pinned_blocks} of the {total_blocks} blocks ({holders}), leaving {free_blocks}; \
         unpin contexts (DELETE /v1/contexts/ID) or raise --kv-memory"
    )]
    KvPinned {
        tokens: usize,
        need_blocks: usize,
        pinned_blocks: usize,
        total_blocks: usize,
        free_blocks: usize,
        /// The largest pinned contexts, e.g. `brief: 120 blocks, docs: 40 blocks`.
        holders: String,
    },
    /// Not admitted within the queue timeout.
    #[error(
        "the request waited {waited_s} s in the queue without being admitted (the queue \
         timeout); the server is overloaded, retry later"
    )]
    QueueTimeout { waited_s: u64 },
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("the engine has stopped")]
    Stopped,
    /// The device failed (a fatal backend error): nothing more runs in this process.
    #[error("the device failed ({0}); the server must be restarted")]
    DeviceLost(String),
}
