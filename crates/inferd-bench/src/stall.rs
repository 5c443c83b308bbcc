//! The stall workload: agents decode long replies; once all are streaming, one long prompt
//! arrives. Measures how much its prefill stalls their decoding (worst inter-token gap during
//! its prefill vs the median gap before it) and the long prompt's own TTFT.
//!
//! With `short_arrivals`, short requests arrive `short_after_ms` after the long prompt (also
//! with no decoding agents at all, `agents: 0`): their TTFT says whether a short arrival
//! waits for a long prefill to end.

use crate::agent::{Conversation, PromptMode};
use crate::client::{Client, RequestMeta};
use crate::corpus::Corpus;
use crate::record::{percentile, rate, run_end_us, Clock, ErrorCounts, RequestRecord};
use crate::report::{BenchReport, Workload};
use anyhow::{bail, Result};
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StallConfig {
    /// Decoding agents.
    pub agents: usize,
    /// Their prompt size (tokens).
    pub context_tokens: usize,
    /// Their `max_tokens`: long enough to still be decoding when the long prompt's prefill ends.
    pub reply_tokens: u32,
    /// The long prompt's size (tokens).
    pub long_prompt_tokens: usize,
    /// The long prompt's `max_tokens`.
    pub long_reply_tokens: u32,
    /// Every agent must have received this many chunks before the long prompt is sent (the
    /// baseline gaps come from them).
    pub warmup_chunks: u64,
    pub token_prompts: bool,
    pub seed: u64,
    /// Short requests sent after the long prompt (0: none).
    #[serde(default)]
    pub short_arrivals: usize,
    /// Their prompt size (tokens).
    #[serde(default = "default_short_tokens")]
    pub short_prompt_tokens: usize,
    /// Their `max_tokens`.
    #[serde(default = "default_short_tokens_u32")]
    pub short_reply_tokens: u32,
    /// How long after the long prompt they are sent.
    #[serde(default)]
    pub short_after_ms: u64,
}

fn default_short_tokens() -> usize {
    16
}

fn default_short_tokens_u32() -> u32 {
    16
}

impl Default for StallConfig {
    fn default() -> Self {
        StallConfig {
            agents: 8,
            context_tokens: 128,
            reply_tokens: 256,
            long_prompt_tokens: 2048,
            long_reply_tokens: 4,
            warmup_chunks: 16,
            token_prompts: false,
            seed: 1,
            short_arrivals: 0,
            short_prompt_tokens: 16,
            short_reply_tokens: 16,
            short_after_ms: 3000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StallSummary {
    /// usage.prompt_tokens of the long prompt.
    pub long_prompt_tokens: Option<u64>,
    /// When the long prompt was sent, since the agents' release.
    pub long_arrival_s: f64,
    pub long_first_token_s: Option<f64>,
    pub long_ttft_ms: Option<f64>,
    /// Median gap of the decoding agents before the long prompt arrived.
    pub baseline_gap_p50_ms: Option<f64>,
    /// Worst gap of a decoding agent that overlaps the long prompt's prefill (arrival to its
    /// first token, or its end if it failed).
    pub worst_gap_during_prefill_ms: Option<f64>,
    /// Per agent, the same (None: no gap of that agent overlapped the prefill).
    pub agent_worst_gap_during_prefill_ms: Vec<Option<f64>>,
    /// worst_gap_during_prefill / baseline_gap_p50.
    pub stall_ratio: Option<f64>,
    /// Agents whose stream went on past the end of the prefill (only those measure the stall
    /// fully).
    pub agents_decoding_through_prefill: usize,
    /// TTFT of each short arrival, in arrival order.
    #[serde(default)]
    pub short_ttft_ms: Vec<Option<f64>>,
    /// Short arrivals whose first token came before the long prompt's.
    #[serde(default)]
    pub short_before_long: usize,
    pub generated_tokens: u64,
    pub wall_s: f64,
    pub tok_per_s: f64,
    pub errors: ErrorCounts,
    pub warnings: Vec<String>,
}

impl StallSummary {
    /// `records`: the agents' (role "agent") and the long prompt's (role "long_prompt").
    pub fn from_records(records: &[RequestRecord], n_agents: usize, wall_us: u64) -> Self {
        let mut warnings = Vec::new();
        let long = records.iter().find(|r| r.role == "long_prompt");
        let agents: Vec<&RequestRecord> = records.iter().filter(|r| r.role == "agent").collect();
        let arrival = long.map(|l| l.start_us).unwrap_or(0);
        let prefill_end = long
            .map(|l| l.first_token_us.unwrap_or(l.end_us))
            .unwrap_or(0);
        if long.is_none() {
            warnings.push("the long prompt was never sent".into());
        } else if long.is_some_and(|l| l.first_token_us.is_none()) {
            warnings.push("the long prompt got no token; its prefill end is its end".into());
        }
        let mut before: Vec<f64> = Vec::new();
        let mut per_agent = vec![None; n_agents];
        let mut through = 0;
        for r in &agents {
            for w in r.chunk_us.windows(2) {
                let (a, b) = (w[0], w[1]);
                let gap = (b - a) as f64 / 1000.0;
                if b <= arrival {
                    before.push(gap);
                } else if a < prefill_end {
                    if let Some(slot) = per_agent.get_mut(r.agent) {
                        *slot = Some(slot.map_or(gap, |g: f64| g.max(gap)));
                    }
                }
            }
            if r.chunk_us.last().is_some_and(|&t| t > prefill_end) {
                through += 1;
            }
        }
        if long.is_some() && through < agents.len() {
            warnings.push(format!(
                "{} of {} agents stopped decoding before the long prompt's prefill ended; \
                 raise --reply",
                agents.len() - through,
                agents.len()
            ));
        }
        before.sort_by(|a, b| a.total_cmp(b));
        let baseline = (!before.is_empty()).then(|| percentile(&before, 0.5));
        let worst = per_agent.iter().flatten().copied().reduce(f64::max);
        let shorts: Vec<&RequestRecord> = records.iter().filter(|r| r.role == "short").collect();
        let short_ttft_ms = shorts
            .iter()
            .map(|r| r.ttft().map(|t| t as f64 / 1000.0))
            .collect();
        let short_before_long = shorts
            .iter()
            .filter(|r| r.first_token_us.is_some_and(|t| t < prefill_end))
            .count();
        let generated_tokens: u64 = records.iter().map(|r| r.completion_tokens).sum();
        let wall_s = wall_us as f64 / 1e6;
        StallSummary {
            long_prompt_tokens: long.and_then(|l| l.prompt_tokens),
            long_arrival_s: arrival as f64 / 1e6,
            long_first_token_s: long.and_then(|l| l.first_token_us).map(|t| t as f64 / 1e6),
            long_ttft_ms: long.and_then(|l| l.ttft()).map(|t| t as f64 / 1000.0),
            baseline_gap_p50_ms: baseline,
            worst_gap_during_prefill_ms: worst,
            agent_worst_gap_during_prefill_ms: per_agent,
            stall_ratio: match (worst, baseline) {
                (Some(w), Some(b)) if b > 0.0 => Some(w / b),
                _ => None,
            },
            agents_decoding_through_prefill: through,
            short_ttft_ms,
            short_before_long,
            generated_tokens,
            wall_s,
            tok_per_s: rate(generated_tokens, wall_s),
            errors: ErrorCounts::of(records),
            warnings,
        }
    }
}

/// Runs the stall workload. `client.config.model` should already be resolved.
pub async fn run_stall(
    client: &Client,
    cfg: &StallConfig,
    pb: &ProgressBar,
) -> Result<BenchReport> {
    if cfg.reply_tokens == 0 || cfg.long_prompt_tokens == 0 {
        bail!("stall: reply and long prompt must be at least 1");
    }
    if cfg.agents == 0 && cfg.short_arrivals == 0 {
        bail!("stall: with no decoding agents, send short arrivals (--short N)");
    }
    let corpus = Corpus::new(cfg.seed);
    pb.set_message("calibrating");
    let mode = PromptMode::prepare(client, &corpus, cfg.token_prompts).await?;
    let n = cfg.agents;
    pb.set_length((n + 1 + cfg.short_arrivals) as u64);
    pb.set_position(0);
    pb.set_message("agents starting");
    pb.reset_elapsed();

    let chunks: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let finished: Arc<Vec<AtomicBool>> = Arc::new((0..n).map(|_| AtomicBool::new(false)).collect());
    let clock = Clock::start();
    let mut handles = Vec::with_capacity(n);
    for agent in 0..n {
        let conv = Conversation::new(&corpus, agent, cfg.context_tokens, &mode);
        let (client, chunks, finished, pb) =
            (client.clone(), chunks.clone(), finished.clone(), pb.clone());
        let reply_tokens = cfg.reply_tokens;
        handles.push(tokio::spawn(async move {
            let meta = RequestMeta {
                agent,
                turn: 0,
                role: "agent",
            };
            let mut on_chunk = |c| chunks[agent].store(c, Ordering::Relaxed);
            let reply = client
                .stream(&conv.prompt(), reply_tokens, &clock, meta, &mut on_chunk)
                .await;
            finished[agent].store(true, Ordering::Relaxed);
            pb.inc(1);
            reply.record
        }));
    }
    // Wait until every agent streams (or has ended: then the summary warns).
    loop {
        let ready = (0..n).all(|a| {
            chunks[a].load(Ordering::Relaxed) >= cfg.warmup_chunks
                || finished[a].load(Ordering::Relaxed)
        });
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    pb.set_message("long prompt sent");
    // The long prompt is "agent n": its own corpus stream, sharing nothing with the others.
    let long_conv = Conversation::new(&corpus, n, cfg.long_prompt_tokens, &mode);
    let meta = RequestMeta {
        agent: n,
        turn: 0,
        role: "long_prompt",
    };
    let long = {
        let (client, pb) = (client.clone(), pb.clone());
        let reply = cfg.long_reply_tokens;
        tokio::spawn(async move {
            let r = client
                .stream(&long_conv.prompt(), reply, &clock, meta, &mut |_| {})
                .await;
            pb.inc(1);
            r.record
        })
    };
    // Short arrivals while the long prompt is read: each an "agent" of its own corpus
    // stream past the long prompt's.
    let mut shorts = Vec::with_capacity(cfg.short_arrivals);
    if cfg.short_arrivals > 0 {
        tokio::time::sleep(Duration::from_millis(cfg.short_after_ms)).await;
        pb.set_message("short requests sent");
        for i in 0..cfg.short_arrivals {
            let conv = Conversation::new(&corpus, n + 1 + i, cfg.short_prompt_tokens, &mode);
            let (client, pb) = (client.clone(), pb.clone());
            let reply = cfg.short_reply_tokens;
            shorts.push(tokio::spawn(async move {
                let meta = RequestMeta {
                    agent: n + 1 + i,
                    turn: 0,
                    role: "short",
                };
                let r = client
                    .stream(&conv.prompt(), reply, &clock, meta, &mut |_| {})
                    .await;
                pb.inc(1);
                r.record
            }));
        }
    }
    let mut records = Vec::with_capacity(n + 1 + shorts.len());
    for h in handles {
        records.push(h.await?);
    }
    records.push(long.await?);
    for h in shorts {
        records.push(h.await?);
    }
    pb.set_message("long prompt done");
    let wall_us = run_end_us(&records);
    let summary = StallSummary::from_records(&records, n, wall_us);
    Ok(BenchReport::new(
        client.config.clone(),
        mode.calibration().cloned(),
        Workload::Stall {
            config: cfg.clone(),
            summary,
        },
        records,
    ))
}
