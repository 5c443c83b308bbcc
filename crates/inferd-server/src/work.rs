//! Request preparation off the async threads: rendering chat templates, tokenizing and
//! compiling grammars run here, on a fixed pool of threads.
//!
//! - **Bounded.** At most `threads` preparations run at once, however many requests
//!   arrive; the rest wait their turn in order, each holding only its request body.
//! - **A known stack.** Every worker has [`STACK_BYTES`] of stack, so the recursion of
//!   template rendering and grammar compilation over inputs within the request limits
//!   (JSON nesting ≤ 128, schema limits in `inferd_grammar::SchemaLimits`) fits with room
//!   to spare. The stack is reserved address space: pages are touched only when used.
//! - **A panic is an error, not a crash.** A job that panics answers 500; the worker
//!   lives on.

use std::panic::{catch_unwind, AssertUnwindSafe};

use tokio::sync::oneshot;

use crate::error::ApiError;

/// Stack of each preparation thread.
pub const STACK_BYTES: usize = 64 << 20;

/// The preparation pool.
pub struct Workers {
    pool: rayon::ThreadPool,
}

impl Workers {
    /// `threads` workers (at least 1).
    pub fn new(threads: usize) -> Result<Self, String> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .stack_size(STACK_BYTES)
            .thread_name(|i| format!("inferd-prep-{i}"))
            .build()
            .map_err(|e| format!("starting the request preparation threads: {e}"))?;
        Ok(Workers { pool })
    }

    /// One worker per core, at least two.
    pub fn per_core() -> Result<Self, String> {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        Workers::new(n.max(2))
    }

    /// Runs `job` on a worker and waits for its result without blocking the caller's
    /// thread. Jobs start in the order they were given.
    pub async fn run<T, F>(&self, job: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.pool.spawn_fifo(move || {
            let r = catch_unwind(AssertUnwindSafe(job)).unwrap_or_else(|p| {
                let what = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(ApiError::internal(format!(
                    "preparing the request failed: {what}"
                )))
            });
            let _ = tx.send(r);
        });
        rx.await
            .map_err(|_| ApiError::internal("preparing the request failed"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(n: usize) -> usize {
        // Deep recursion with a real frame, as a compiler's would be.
        let pad = [n as u8; 512];
        std::hint::black_box(&pad);
        if n == 0 {
            0
        } else {
            1 + depth(n - 1)
        }
    }

    #[tokio::test]
    async fn jobs_get_a_large_stack_and_panics_become_errors() {
        let w = Workers::new(1).unwrap();
        // ~60k frames of > 512 bytes: far past a default 2 MiB thread stack.
        let d = w.run(|| Ok(depth(60_000))).await.unwrap();
        assert_eq!(d, 60_000);
        let e = w
            .run(|| -> Result<(), ApiError> { panic!("boom") })
            .await
            .unwrap_err();
        assert_eq!(e.status.as_u16(), 500);
        assert!(e.message.contains("boom"), "{}", e.message);
        // The worker survived its panic.
        assert_eq!(w.run(|| Ok(7)).await.unwrap(), 7);
    }
}
