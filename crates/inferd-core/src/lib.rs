//! Engine logic with no tensors and no IO.
//!
//! - [`sampling`]: sampling parameters, their validation, and a seeded,
//!   allocation-free-per-call [`Sampler`].
//! - [`kv`]: the KV block pool (reference counts, O(1) LRU free list, content hashes
//!   ready for the prefix cache) and the per-sequence block tables.
//! - [`sched`]: the token-counting scheduler (chunked prefill beside decodes, admission
//!   by KV budget with lookahead and aging, priorities, preemption).
//! - [`spec`]: speculative decoding's copy (n-gram) drafts and their configuration.

pub mod kv;
pub mod sampling;
pub mod sched;
pub mod spec;

pub use sampling::{Sampled, Sampler, SamplingError, SamplingParams};
