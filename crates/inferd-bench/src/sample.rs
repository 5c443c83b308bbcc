//! The requests a report's TTFT distribution (the CDF plot) and cached fraction are drawn
//! from, per workload:
//!
//! | workload | requests |
//! |---|---|
//! | fleet, arrivals, multi-turn | every agent request (all turns) |
//! | forked | the agents' requests (not the brief's warm-up) |
//! | resume | the agents' requests on return (turn 1) |
//! | stall | the long prompt |

use crate::record::RequestRecord;
use crate::report::{BenchReport, Workload};

/// The workload's measured requests (see the module doc).
pub fn measured_requests(r: &BenchReport) -> Vec<&RequestRecord> {
    let keep = |x: &&RequestRecord| match &r.workload {
        Workload::Stall { .. } => x.role == "long_prompt",
        Workload::Resume { .. } => x.role == "agent" && x.turn == 1,
        _ => x.role == "agent",
    };
    r.requests.iter().filter(keep).collect()
}

/// TTFTs of the measured requests that got a first token, ms, ascending.
pub fn ttft_ms(r: &BenchReport) -> Vec<f64> {
    let mut v: Vec<f64> = measured_requests(r)
        .iter()
        .filter_map(|x| x.ttft())
        .map(|t| t as f64 / 1000.0)
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// Mean `cached_tokens / prompt_tokens` of the measured requests, or `None` when the server
/// reported `cached_tokens` for none of them.
pub fn mean_cached_fraction(r: &BenchReport) -> Option<f64> {
    let m = measured_requests(r);
    if m.is_empty() || m.iter().all(|x| x.cached_tokens.is_none()) {
        return None;
    }
    Some(m.iter().map(|x| x.cached_fraction()).sum::<f64>() / m.len() as f64)
}

/// The run's agent count (multi-turn: 1; stall: the decoding agents).
pub fn agents(r: &BenchReport) -> usize {
    match &r.workload {
        Workload::Fleet { config, .. } => config.agents,
        Workload::Stall { config, .. } => config.agents,
        Workload::Arrivals { config, .. } => config.agents,
        Workload::MultiTurn { .. } => 1,
        Workload::Forked { config, .. } => config.agents,
        Workload::Resume { config, .. } => config.agents,
    }
}
