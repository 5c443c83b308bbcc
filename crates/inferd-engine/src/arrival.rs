//! Requests on their way in: read by the server (the body whole), not yet handed to the
//! engine (parsed, templated, tokenized). Agents often arrive together (a fleet starts, a
//! fan-out of sub-agents, returns from one tool call); the engine's next step waits a
//! moment for such requests, so they join the pass it queues next instead of a pass behind
//! it (with steps overlapped that pass is queued while the one before runs, before the
//! others' bodies are parsed: eight agents back on 16k contexts waited behind the first
//! one's pass and its decode step).
//!
//! Policy (`Engine::await_arrivals`): only while a pass is in flight, so the wait overlaps
//! the device's work, and at most `EngineConfig::arrival_wait`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::handle::{Msg, Shared};

/// Requests on their way in (`Shared::arriving`).
#[derive(Default)]
pub(crate) struct Arriving(AtomicUsize);

impl Arriving {
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// One request on its way in, from `EngineHandle::arrival` until it is submitted
/// (`EngineHandle::submit_arrived`: the engine lets it go when it takes the request) or
/// dropped (a request refused before it was submitted: the engine is woken, so it waits
/// for it no longer).
pub struct Arrival {
    shared: Arc<Shared>,
    /// Taken by the engine with its request (no wake-up needed: it is the engine).
    settled: bool,
}

impl Arrival {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        shared.arriving.0.fetch_add(1, Ordering::SeqCst);
        Arrival {
            shared,
            settled: false,
        }
    }

    /// The engine took its request.
    pub(crate) fn settle(mut self) {
        self.settled = true;
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        self.shared.arriving.0.fetch_sub(1, Ordering::SeqCst);
        if !self.settled {
            // (If the engine is gone, nobody waits.)
            let inbox = self.shared.inbox.lock().unwrap_or_else(|e| e.into_inner());
            let _ = inbox.send(Msg::Wake);
        }
    }
}

impl std::fmt::Debug for Arrival {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Arrival")
    }
}
