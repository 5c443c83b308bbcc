//! The serving engine: one thread owns the model, the paged KV cache and the scheduler,
//! and runs steps. Each step the scheduler picks the running decodes and prefill
//! chunks that fit the token budgets (continuous batching, chunked prefill), the model
//! runs them as one forward pass, each sampling sequence gets its next token, and the
//! output thread turns the token into text on the request's stream. Callers talk to it through an
//! [`EngineHandle`]; dropping a request's stream cancels it.

mod admit;
mod agent;
mod arrival;
mod config;
mod draft;
mod draft_blocks;
mod drafting;
mod engine;
mod handle;
mod held;
mod land;
mod load;
mod lost;
mod masks;
mod memory;
mod output;
mod request;
mod runner;
mod seq;
mod spill;
mod spill_read;
mod spill_state;
mod stats;
mod stop;
pub mod throttle;

pub use arrival::Arrival;
pub use config::{
    available_memory, kv_blocks_for, kv_budget_bytes, parse_kv_budget, split_budget, EngineConfig,
    KvBudget, DEFAULT_QUEUE_TIMEOUT,
};
pub use engine::{start, start_with_draft};
pub use handle::{EngineHandle, ModelInfo, RequestStream};
pub use memory::{
    check_id, CacheReport, ContextInfo, ContextSpec, MemoryError, SessionInfo, MAX_ID_BYTES,
};
pub use request::{
    CacheMode, Delta, Event, FinishReason, GenRequest, SubmitError, TokenOut, Usage,
};
pub use spill::SpillConfig;
pub use stats::{names as metric_names, EngineStats};
pub use stop::{StopMatcher, StopStep};
