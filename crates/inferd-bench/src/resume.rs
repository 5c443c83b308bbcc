//! The resume workload: N agents each send turn 0 (released together), then F requests of
//! unrelated traffic (distinct contexts, N at a time) fill the server's cache, then the N
//! agents come back with turn 1 (their conversation, the reply and a short user message).
//! Measures the TTFT on return against turn 0's, and how much of each returning prompt the
//! server still had cached (`usage.prompt_tokens_details.cached_tokens`).

use crate::agent::{Conversation, PromptMode};
use crate::client::{Client, RequestMeta};
use crate::corpus::Corpus;
use crate::extensions::{check_refusals, run_id, Ext};
use crate::forked::{agent_cache_rows, mean_cached_fraction, AgentCache};
use crate::record::{rate, run_end_us, Clock, Dist, ErrorCounts, RequestRecord};
use crate::report::{dist_row, BenchReport, Workload};
use anyhow::{bail, Result};
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResumeConfig {
    pub agents: usize,
    /// Each agent's (and each filler request's) turn-0 prompt size (tokens).
    pub context_tokens: usize,
    /// `max_tokens` of every reply (the filler's included).
    pub reply_tokens: u32,
    /// Unrelated requests between turn 0 and the return.
    pub filler_requests: usize,
    pub token_prompts: bool,
    pub seed: u64,
    /// The agents' requests carry `inferd.session` (an id unique to the run and the agent);
    /// the filler's do not (one-off requests that never come back).
    #[serde(default)]
    pub sessions: bool,
}

impl Default for ResumeConfig {
    fn default() -> Self {
        ResumeConfig {
            agents: 4,
            context_tokens: 2048,
            reply_tokens: 64,
            filler_requests: 16,
            token_prompts: false,
            seed: 1,
            sessions: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResumeSummary {
    /// All requests (turn 0, filler, return).
    pub requests: usize,
    pub ok_requests: usize,
    pub errors: ErrorCounts,
    pub generated_tokens: u64,
    /// Run start to the end of the last request.
    pub wall_s: f64,
    /// generated_tokens / wall_s.
    pub tok_per_s: f64,
    /// The agents' turn-0 TTFTs.
    pub ttft_turn0_ms: Dist,
    /// The filler's TTFTs.
    pub ttft_filler_ms: Dist,
    /// The agents' TTFTs on return (turn 1).
    pub ttft_return_ms: Dist,
    /// ttft_return_ms.p50 / ttft_turn0_ms.p50 (none when either is empty or zero).
    pub return_vs_turn0_p50: Option<f64>,
    /// Mean of the returning agents' cached fractions.
    pub mean_cached_fraction_return: f64,
    pub gap_ms: Dist,
    /// Each agent's turn-0 request.
    pub turn0: Vec<AgentCache>,
    /// Each agent's return (turn 1).
    pub returns: Vec<AgentCache>,
}

impl ResumeSummary {
    /// `records`: agents' requests (role "agent", turns 0 and 1) and the filler (role "filler").
    pub fn from_records(records: &[RequestRecord], wall_us: u64) -> Self {
        let generated_tokens: u64 = records.iter().map(|r| r.completion_tokens).sum();
        let wall_s = wall_us as f64 / 1e6;
        let agent = |turn: usize| {
            let mut v: Vec<&RequestRecord> = records
                .iter()
                .filter(|r| r.role == "agent" && r.turn == turn)
                .collect();
            v.sort_by_key(|r| r.agent);
            v
        };
        let (t0, t1) = (agent(0), agent(1));
        let ttft_turn0_ms = Dist::from_us(t0.iter().filter_map(|r| r.ttft()));
        let ttft_return_ms = Dist::from_us(t1.iter().filter_map(|r| r.ttft()));
        let returns: Vec<AgentCache> = t1.iter().map(|r| AgentCache::of(r)).collect();
        ResumeSummary {
            requests: records.len(),
            ok_requests: records.iter().filter(|r| r.ok()).count(),
            errors: ErrorCounts::of(records),
            generated_tokens,
            wall_s,
            tok_per_s: rate(generated_tokens, wall_s),
            ttft_filler_ms: Dist::from_us(
                records
                    .iter()
                    .filter(|r| r.role == "filler")
                    .filter_map(|r| r.ttft()),
            ),
            return_vs_turn0_p50: (ttft_turn0_ms.n > 0
                && ttft_return_ms.n > 0
                && ttft_turn0_ms.p50 > 0.0)
                .then(|| ttft_return_ms.p50 / ttft_turn0_ms.p50),
            ttft_turn0_ms,
            ttft_return_ms,
            mean_cached_fraction_return: mean_cached_fraction(&returns),
            gap_ms: Dist::from_us(records.iter().flat_map(|r| r.gaps_us())),
            turn0: t0.iter().map(|r| AgentCache::of(r)).collect(),
            returns,
        }
    }
}

pub(crate) fn table(s: &mut String, c: &ResumeConfig, m: &ResumeSummary) {
    let _ = writeln!(
        s,
        "resume  {} agents, context {} tokens{}, reply {} tokens, {} filler requests between turns",
        c.agents,
        c.context_tokens,
        if c.token_prompts { " (token ids)" } else { "" },
        c.reply_tokens,
        c.filler_requests
    );
    dist_row(s, "TTFT turn 0", &m.ttft_turn0_ms, "ms");
    dist_row(s, "TTFT filler", &m.ttft_filler_ms, "ms");
    dist_row(s, "TTFT on return", &m.ttft_return_ms, "ms");
    let _ = writeln!(
        s,
        "  {:<26} {}",
        "return / turn 0 (p50)",
        m.return_vs_turn0_p50
            .map(|r| format!("{r:.2}x"))
            .unwrap_or_else(|| "n/a".into())
    );
    let _ = writeln!(
        s,
        "  {:<26} {:.1}%",
        "mean cached on return",
        m.mean_cached_fraction_return * 100.0
    );
    let _ = writeln!(s, "  on return:");
    agent_cache_rows(s, &m.returns);
    dist_row(s, "inter-token gap", &m.gap_ms, "ms");
    let _ = writeln!(
        s,
        "  {:<26} {} tokens in {:.3} s = {:.2} tok/s",
        "generated", m.generated_tokens, m.wall_s, m.tok_per_s
    );
}

/// Sends `convs` (agent index, conversation, extensions) together; the replies in the same
/// order.
async fn together(
    client: &Client,
    convs: Vec<(usize, Conversation, Ext)>,
    turn: usize,
    role: &'static str,
    reply_tokens: u32,
    clock: &Clock,
    pb: &ProgressBar,
) -> Result<Vec<crate::client::Reply>> {
    let mut handles = Vec::with_capacity(convs.len());
    for (agent, conv, ext) in convs {
        let (client, pb, clock) = (client.clone(), pb.clone(), *clock);
        handles.push(tokio::spawn(async move {
            let meta = RequestMeta { agent, turn, role };
            let reply = client
                .stream_ext(
                    &conv.prompt(),
                    reply_tokens,
                    &ext,
                    &clock,
                    meta,
                    &mut |_| {},
                )
                .await;
            pb.inc(1);
            reply
        }));
    }
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await?);
    }
    Ok(out)
}

/// Runs the resume workload. `client.config.model` should already be resolved.
pub async fn run_resume(
    client: &Client,
    cfg: &ResumeConfig,
    pb: &ProgressBar,
) -> Result<BenchReport> {
    if cfg.agents == 0 || cfg.reply_tokens == 0 {
        bail!("resume: agents and reply must be at least 1");
    }
    let run = run_id();
    if cfg.sessions {
        pb.set_message("checking inferd extensions");
        client.check_extensions(&run).await?;
    }
    let ext = |a: usize| {
        if cfg.sessions {
            Ext::session(&run, a)
        } else {
            Ext::default()
        }
    };
    let corpus = Corpus::new(cfg.seed);
    pb.set_message("calibrating");
    let mode = PromptMode::prepare(client, &corpus, cfg.token_prompts).await?;
    pb.set_length((2 * cfg.agents + cfg.filler_requests) as u64);
    pb.set_position(0);
    pb.set_message("turn 0");
    pb.reset_elapsed();

    let mut convs: Vec<Conversation> = (0..cfg.agents)
        .map(|a| Conversation::new(&corpus, a, cfg.context_tokens, &mode))
        .collect();
    let clock = Clock::start();
    let mut records = Vec::with_capacity(2 * cfg.agents + cfg.filler_requests);

    let first = together(
        client,
        convs
            .iter()
            .enumerate()
            .map(|(a, c)| (a, c.clone(), ext(a)))
            .collect(),
        0,
        "agent",
        cfg.reply_tokens,
        &clock,
        pb,
    )
    .await?;
    for (a, reply) in first.into_iter().enumerate() {
        // A failed turn still advances, as in the fleet workload.
        convs[a].advance(&corpus, a, 0, &reply);
        records.push(reply.record);
    }

    // Filler: contexts of agents N.., N at a time.
    pb.set_message("filler");
    let filler: Vec<usize> = (cfg.agents..cfg.agents + cfg.filler_requests).collect();
    for batch in filler.chunks(cfg.agents) {
        let convs = batch
            .iter()
            .map(|&a| {
                let conv = Conversation::new(&corpus, a, cfg.context_tokens, &mode);
                (a, conv, Ext::default())
            })
            .collect();
        let replies = together(client, convs, 0, "filler", cfg.reply_tokens, &clock, pb).await?;
        records.extend(replies.into_iter().map(|r| r.record));
    }

    pb.set_message("return");
    let back = together(
        client,
        convs
            .into_iter()
            .enumerate()
            .map(|(a, c)| (a, c, ext(a)))
            .collect(),
        1,
        "agent",
        cfg.reply_tokens,
        &clock,
        pb,
    )
    .await?;
    records.extend(back.into_iter().map(|r| r.record));
    if cfg.sessions {
        let agents = records.iter().filter(|r| r.role == "agent");
        check_refusals(agents, "inferd.session")?;
    }

    let wall_us = run_end_us(&records);
    let summary = ResumeSummary::from_records(&records, wall_us);
    Ok(BenchReport::new(
        client.config.clone(),
        mode.calibration().cloned(),
        Workload::Resume {
            config: cfg.clone(),
            summary,
        },
        records,
    ))
}
