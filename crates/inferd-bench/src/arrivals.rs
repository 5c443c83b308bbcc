//! The arrivals workload: N agents arrive at Poisson-distributed times (a seeded schedule at
//! `rate` agents per second), each sending one request. Measures the TTFT each one sees under
//! the load of those before it, and when the last one is done.

use crate::agent::{Conversation, PromptMode};
use crate::client::{Client, RequestMeta};
use crate::corpus::{Corpus, Rng};
use crate::record::{rate, run_end_us, Clock, Dist, ErrorCounts, RequestRecord};
use crate::report::{dist_row, BenchReport, Workload};
use anyhow::{bail, Result};
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::Duration;

/// Derivation label of the arrival schedule's random stream (apart from the corpus's).
const PURPOSE_ARRIVALS: u64 = 101;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArrivalsConfig {
    pub agents: usize,
    /// Mean arrivals per second.
    pub rate_per_s: f64,
    /// Each agent's prompt size (tokens).
    pub context_tokens: usize,
    /// `max_tokens` of each reply.
    pub reply_tokens: u32,
    pub token_prompts: bool,
    /// Seeds both the prompts and the arrival schedule.
    pub seed: u64,
}

impl ArrivalsConfig {
    /// The settings a run can take (checked before any request).
    pub fn validate(&self) -> Result<()> {
        if self.agents == 0 || self.reply_tokens == 0 {
            bail!("arrivals: agents and reply must be at least 1");
        }
        if !(self.rate_per_s >= 1e-3 && self.rate_per_s.is_finite()) {
            bail!("arrivals: the rate must be a number of agents per second of at least 0.001");
        }
        Ok(())
    }
}

impl Default for ArrivalsConfig {
    fn default() -> Self {
        ArrivalsConfig {
            agents: 16,
            rate_per_s: 2.0,
            context_tokens: 512,
            reply_tokens: 64,
            token_prompts: false,
            seed: 1,
        }
    }
}

/// Arrival offsets (seconds since the run's start) of `agents` agents: agent 0 at 0, then
/// exponentially distributed gaps of mean `1 / rate_per_s` (a Poisson process), from a stream
/// seeded by `seed`. The same arguments give the same schedule.
pub fn arrival_schedule(seed: u64, agents: usize, rate_per_s: f64) -> Vec<f64> {
    let mut rng = Rng::derive(seed, &[PURPOSE_ARRIVALS]);
    let mut t = 0.0;
    (0..agents)
        .map(|i| {
            if i > 0 {
                // Uniform in (0, 1]: 53 random bits.
                let u = 1.0 - (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                t += -u.ln() / rate_per_s;
            }
            t
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArrivalsSummary {
    pub requests: usize,
    pub ok_requests: usize,
    pub errors: ErrorCounts,
    /// Successful replies with fewer than `reply_tokens` tokens (the server stopped at EOS).
    pub short_replies: usize,
    pub generated_tokens: u64,
    /// Run start to the end of the last request.
    pub all_done_s: f64,
    /// generated_tokens / all_done_s.
    pub tok_per_s: f64,
    /// Each agent's scheduled arrival, s.
    pub scheduled_s: Vec<f64>,
    /// How late each request was actually sent against its schedule (client overhead).
    pub send_lag_ms: Dist,
    pub ttft_ms: Dist,
    /// Gaps between consecutive text chunks of every request.
    pub gap_ms: Dist,
}

impl ArrivalsSummary {
    pub fn from_records(records: &[RequestRecord], scheduled_s: &[f64], wall_us: u64) -> Self {
        let generated_tokens: u64 = records.iter().map(|r| r.completion_tokens).sum();
        let all_done_s = wall_us as f64 / 1e6;
        ArrivalsSummary {
            requests: records.len(),
            ok_requests: records.iter().filter(|r| r.ok()).count(),
            errors: ErrorCounts::of(records),
            short_replies: records.iter().filter(|r| r.short()).count(),
            generated_tokens,
            all_done_s,
            tok_per_s: rate(generated_tokens, all_done_s),
            scheduled_s: scheduled_s.to_vec(),
            send_lag_ms: Dist::from_values(records.iter().filter_map(|r| {
                let at = scheduled_s.get(r.agent)?;
                Some((r.start_us as f64 / 1e3 - at * 1e3).max(0.0))
            })),
            ttft_ms: Dist::from_us(records.iter().filter_map(|r| r.ttft())),
            gap_ms: Dist::from_us(records.iter().flat_map(|r| r.gaps_us())),
        }
    }
}

pub(crate) fn table(s: &mut String, c: &ArrivalsConfig, m: &ArrivalsSummary) {
    let _ = writeln!(
        s,
        "arrivals  {} agents at {} /s (Poisson, seed {}), context {} tokens{}, reply {} tokens",
        c.agents,
        c.rate_per_s,
        c.seed,
        c.context_tokens,
        if c.token_prompts { " (token ids)" } else { "" },
        c.reply_tokens
    );
    let _ = writeln!(
        s,
        "  {:<26} {} sent, {} ok, {} errors, {} short replies",
        "requests", m.requests, m.ok_requests, m.errors.total, m.short_replies
    );
    let _ = writeln!(
        s,
        "  {:<26} {:.3} s",
        "last arrival",
        m.scheduled_s.last().copied().unwrap_or(0.0)
    );
    dist_row(s, "TTFT", &m.ttft_ms, "ms");
    dist_row(s, "inter-token gap", &m.gap_ms, "ms");
    dist_row(s, "send lag vs schedule", &m.send_lag_ms, "ms");
    let _ = writeln!(
        s,
        "  {:<26} {} tokens in {:.3} s = {:.2} tok/s",
        "generated", m.generated_tokens, m.all_done_s, m.tok_per_s
    );
    let _ = writeln!(s, "  {:<26} {:.3} s", "all done", m.all_done_s);
}

/// Runs the arrivals workload. `client.config.model` should already be resolved.
pub async fn run_arrivals(
    client: &Client,
    cfg: &ArrivalsConfig,
    pb: &ProgressBar,
) -> Result<BenchReport> {
    cfg.validate()?;
    let corpus = Corpus::new(cfg.seed);
    pb.set_message("calibrating");
    let mode = PromptMode::prepare(client, &corpus, cfg.token_prompts).await?;
    let schedule = arrival_schedule(cfg.seed, cfg.agents, cfg.rate_per_s);
    pb.set_length(cfg.agents as u64);
    pb.set_position(0);
    pb.set_message("arriving");
    pb.reset_elapsed();

    // Prompts are built before the clock starts, so building them adds no send lag.
    let convs: Vec<Conversation> = (0..cfg.agents)
        .map(|a| Conversation::new(&corpus, a, cfg.context_tokens, &mode))
        .collect();
    let clock = Clock::start();
    let t0 = tokio::time::Instant::now();
    let mut handles = Vec::with_capacity(cfg.agents);
    for (agent, (conv, at)) in convs.into_iter().zip(schedule.iter().copied()).enumerate() {
        let (client, pb) = (client.clone(), pb.clone());
        let reply_tokens = cfg.reply_tokens;
        handles.push(tokio::spawn(async move {
            tokio::time::sleep_until(t0 + Duration::from_secs_f64(at)).await;
            let meta = RequestMeta {
                agent,
                turn: 0,
                role: "agent",
            };
            let reply = client
                .stream(&conv.prompt(), reply_tokens, &clock, meta, &mut |_| {})
                .await;
            pb.inc(1);
            reply.record
        }));
    }
    let mut records = Vec::with_capacity(cfg.agents);
    for h in handles {
        records.push(h.await?);
    }
    let wall_us = run_end_us(&records);
    let summary = ArrivalsSummary::from_records(&records, &schedule, wall_us);
    Ok(BenchReport::new(
        client.config.clone(),
        mode.calibration().cloned(),
        Workload::Arrivals {
            config: cfg.clone(),
            summary,
        },
        records,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_seeded_and_has_the_rate() {
        let a = arrival_schedule(7, 2000, 50.0);
        assert_eq!(a, arrival_schedule(7, 2000, 50.0));
        assert_ne!(a, arrival_schedule(8, 2000, 50.0));
        assert_eq!(a[0], 0.0);
        assert!(a.windows(2).all(|w| w[1] >= w[0]));
        // 1999 gaps of mean 20 ms: about 40 s (a few % off at most).
        let mean_gap = a[1999] / 1999.0;
        assert!((mean_gap - 0.02).abs() < 0.002, "mean gap {mean_gap}");
    }
}
