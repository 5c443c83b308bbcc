//! Benchmark client for OpenAI-compatible servers (inferd, llama.cpp's `llama-server`, ...).
//!
//! Workloads model fleets of agents: [`fleet`] (N agents with private contexts, T turns each),
//! [`stall`] (decoding agents disturbed by one long prompt), [`arrivals`] (agents arriving at
//! Poisson-distributed times), [`multi_turn`] (one conversation growing turn by turn, with
//! the server's prefix-cache hits), [`forked`] (N agents forked off one shared brief) and
//! [`resume`] (agents returning after unrelated traffic has filled the cache). Where the
//! server has them, fleet, multi-turn and resume can send inferd's sessions and forked can pin
//! its brief ([`extensions`]), so that their effect is measured against runs without them.
//! Fleet agents can be asked for JSON replies held to a JSON Schema, or only asked in the
//! prompt ([`structured`]), so that the constraint's cost is measured.
//! Every streamed chunk is timed on one run clock ([`record`]); a run yields a
//! [`report::BenchReport`] holding its config, summary and every request's timings, written as
//! JSON and rendered as a table. [`compare`] sets two reports side by side,
//! [`report::markdown_tables`] many, and [`plot`] draws TTFT CDFs and throughput against agents
//! as SVG.
//!
//! Adding a workload: build prompts with [`agent::Conversation`], send them with
//! [`client::Client::stream`], summarise the records, and add a [`report::Workload`] variant.

pub mod agent;
pub mod arrivals;
pub mod calibrate;
pub mod client;
pub mod compare;
pub mod corpus;
pub mod extensions;
pub mod fleet;
pub mod forked;
pub mod multi_turn;
pub mod plot;
pub mod record;
pub mod report;
pub mod resume;
pub mod sample;
pub mod soak;
pub mod sse;
pub mod stall;
pub mod structured;
pub mod workload_tables;

pub use arrivals::{run_arrivals, ArrivalsConfig, ArrivalsSummary};
pub use client::{Client, ClientConfig};
pub use compare::compare_table;
pub use extensions::{Ext, PinnedContext};
pub use fleet::{run_fleet, FleetConfig, FleetSummary};
pub use forked::{run_forked, AgentCache, ForkedConfig, ForkedSummary};
pub use multi_turn::{run_multi_turn, MultiTurnConfig, MultiTurnSummary, TurnSummary};
pub use record::{Dist, ErrorKind, RequestRecord};
pub use report::{markdown_tables, BenchReport, ExtensionsUsed, StructuredUsed, Workload};
pub use resume::{run_resume, ResumeConfig, ResumeSummary};
pub use soak::{run_soak, SoakConfig, SoakReport};
pub use stall::{run_stall, StallConfig, StallSummary};

/// Runs a future on a single-threaded runtime (the client does little work per chunk, and
/// one thread keeps it from competing with a server on the same cores).
pub fn block_on<F: std::future::Future>(f: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("starting the async runtime: {e}"))?;
    Ok(rt.block_on(f))
}
