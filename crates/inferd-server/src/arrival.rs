//! Tells the engine about a generation request as soon as its body is read, before it is
//! parsed, templated and tokenized, until it is submitted (`EngineHandle::arrival`): a
//! burst of agents then joins one pass instead of each waiting a pass behind the one
//! before (the engine's `arrival.rs` says when it waits, and for how long at most).
//!
//! The generation routes run inside [`scope`]; [`JsonBody`](crate::extract::JsonBody)
//! announces the request when its body is whole, and [`submit`](crate::openai::submit)
//! hands the announcement over with the request. A request refused before it is
//! submitted drops its announcement when its handler returns, which wakes the engine.

use std::cell::RefCell;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use inferd_engine::{Arrival, EngineHandle};

tokio::task_local! {
    /// The announcement of the request this task serves, from its body's arrival to its
    /// submission.
    static ARRIVAL: RefCell<Option<Arrival>>;
}

/// Middleware of the generation routes: their requests may announce themselves.
pub async fn scope(req: Request, next: Next) -> Response {
    ARRIVAL.scope(RefCell::new(None), next.run(req)).await
}

/// The request's body is whole: announce it (within [`scope`]; elsewhere nothing).
pub fn announce(engine: &EngineHandle) {
    let _ = ARRIVAL.try_with(|a| {
        a.borrow_mut().get_or_insert_with(|| engine.arrival());
    });
}

/// The request's announcement, for its submission.
pub fn take() -> Option<Arrival> {
    ARRIVAL.try_with(|a| a.borrow_mut().take()).ok().flatten()
}
