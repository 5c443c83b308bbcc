//! Engine logic with no tensors and no IO.
//!
//! For now this crate holds the token sampler ([`sampling`]): sampling parameters, their
//! validation, and a seeded, allocation-free-per-call [`Sampler`].

pub mod sampling;

pub use sampling::{Sampled, Sampler, SamplingError, SamplingParams};
