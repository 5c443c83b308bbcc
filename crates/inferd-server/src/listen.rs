//! Accepting connections, with the limits a server facing untrusted clients needs
//! (axum's own `serve` has none of them):
//!
//! - **Connection limit.** At most `max_connections` are open; past it new ones wait in
//!   the kernel's backlog instead of taking descriptors the engine and the SSD tier need.
//! - **Header timeout.** A client must send a request's headers within `header_timeout`,
//!   also when a kept-alive connection idles between requests: slow-header clients
//!   (1 byte/s) and idle or half-open connections are closed, their slot freed.
//! - **Body timeout** (in `extract.rs`): a declared body must arrive whole within
//!   `body_timeout`, or the request gets 408.
//! - **Write timeout** (`write_deadline.rs`): a client that reads nothing of its reply for
//!   `write_timeout` loses the connection, and its request is cancelled.
//! - **Graceful stop.** When `shutdown` resolves the listener closes (new connections are
//!   refused), the engine drains (a request read but not yet submitted gets 503), open
//!   connections finish the response in progress and close, and the loop returns once
//!   every one has.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use inferd_engine::EngineHandle;

use crate::write_deadline::WriteDeadline;

/// How often freed memory is handed back to the system.
const TRIM_EVERY: Duration = Duration::from_secs(10);

/// How connections are held to account.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub write_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: default_max_connections(),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(60),
        }
    }
}

/// 1024, or half the process's descriptor limit when that is lower (the rest is for the
/// model, the SSD tier and the log).
pub fn default_max_connections() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur as usize
    } else {
        1024
    };
    (soft / 2).clamp(16, 1024)
}

/// Serves `app` on `listener` under `limits` until `shutdown` resolves (see the module
/// docs), then drains `engine`.
pub async fn run(
    listener: TcpListener,
    app: Router,
    engine: EngineHandle,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    // Memory freed by finished requests goes back to the system now and then.
    let trimmer = tokio::spawn(async {
        let mut tick = tokio::time::interval(TRIM_EVERY);
        loop {
            tick.tick().await;
            let _ = tokio::task::spawn_blocking(crate::state::release_free_memory).await;
        }
    });
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                // Out of descriptors or a connection reset before accept: wait a moment
                // rather than spin; the listener itself is fine.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Tokens go out as soon as they are written.
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let io = TokioIo::new(WriteDeadline::new(stream, limits.write_timeout));
        let conn = graceful.watch(http.serve_connection(io, service));
        tokio::spawn(async move {
            let _ = conn.await;
            drop(slot);
        });
    }
    drop(listener);
    engine.drain();
    graceful.shutdown().await;
    trimmer.abort();
    Ok(())
}
