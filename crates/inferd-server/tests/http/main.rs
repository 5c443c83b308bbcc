//! End-to-end tests of the HTTP API: a real server on a loopback port over
//! SmolLM2-135M-Instruct (skipped when the model is not pulled).

mod anthropic;
mod chat;
mod common;
mod completions;
mod errors;
mod hostile;
mod hostile_fields;
mod hostile_protocols;
mod hybrid;
mod memory;
mod ops;
mod responses;
mod structured;
mod tools;
