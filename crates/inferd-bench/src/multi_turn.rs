//! The multi-turn workload: one conversation growing turn by turn (each turn appends the reply
//! and a short user message). Measures TTFT per turn and how much of each prompt the server
//! served from its prefix cache (`usage.prompt_tokens_details.cached_tokens`).

use crate::agent::{Conversation, PromptMode};
use crate::client::{Client, RequestMeta};
use crate::corpus::Corpus;
use crate::extensions::{check_refusals, run_id, Ext};
use crate::record::{rate, run_end_us, Clock, Dist, ErrorCounts, RequestRecord};
use crate::report::{dist_row, BenchReport, Workload};
use anyhow::{bail, Result};
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MultiTurnConfig {
    pub turns: usize,
    /// Turn-0 prompt size (tokens).
    pub context_tokens: usize,
    /// `max_tokens` of every reply.
    pub reply_tokens: u32,
    pub token_prompts: bool,
    pub seed: u64,
    /// Every turn carries `inferd.session` (an id unique to the run).
    #[serde(default)]
    pub sessions: bool,
}

impl Default for MultiTurnConfig {
    fn default() -> Self {
        MultiTurnConfig {
            turns: 8,
            context_tokens: 2048,
            reply_tokens: 64,
            token_prompts: false,
            seed: 1,
            sessions: false,
        }
    }
}

/// One turn's request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnSummary {
    pub turn: usize,
    pub ttft_ms: Option<f64>,
    /// usage.prompt_tokens.
    pub prompt_tokens: Option<u64>,
    /// usage.prompt_tokens_details.cached_tokens.
    pub cached_tokens: Option<u64>,
    /// cached_tokens / prompt_tokens (0 when the server reports either not).
    pub cached_fraction: f64,
    pub completion_tokens: u64,
    pub ok: bool,
}

impl TurnSummary {
    pub fn of(r: &RequestRecord) -> Self {
        TurnSummary {
            turn: r.turn,
            ttft_ms: r.ttft().map(|t| t as f64 / 1000.0),
            prompt_tokens: r.prompt_tokens,
            cached_tokens: r.cached_tokens,
            cached_fraction: r.cached_fraction(),
            completion_tokens: r.completion_tokens,
            ok: r.ok(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MultiTurnSummary {
    pub requests: usize,
    pub ok_requests: usize,
    pub errors: ErrorCounts,
    pub generated_tokens: u64,
    /// Run start to the end of the last turn.
    pub wall_s: f64,
    /// generated_tokens / wall_s.
    pub tok_per_s: f64,
    /// TTFT of every turn.
    pub ttft_ms: Dist,
    pub gap_ms: Dist,
    pub turns: Vec<TurnSummary>,
}

impl MultiTurnSummary {
    pub fn from_records(records: &[RequestRecord], wall_us: u64) -> Self {
        let generated_tokens: u64 = records.iter().map(|r| r.completion_tokens).sum();
        let wall_s = wall_us as f64 / 1e6;
        MultiTurnSummary {
            requests: records.len(),
            ok_requests: records.iter().filter(|r| r.ok()).count(),
            errors: ErrorCounts::of(records),
            generated_tokens,
            wall_s,
            tok_per_s: rate(generated_tokens, wall_s),
            ttft_ms: Dist::from_us(records.iter().filter_map(|r| r.ttft())),
            gap_ms: Dist::from_us(records.iter().flat_map(|r| r.gaps_us())),
            turns: records.iter().map(TurnSummary::of).collect(),
        }
    }
}

pub(crate) fn table(s: &mut String, c: &MultiTurnConfig, m: &MultiTurnSummary) {
    let _ = writeln!(
        s,
        "multi-turn  one conversation, {} turns, context {} tokens{}, reply {} tokens",
        c.turns,
        c.context_tokens,
        if c.token_prompts { " (token ids)" } else { "" },
        c.reply_tokens
    );
    let _ = writeln!(
        s,
        "  {:>4} {:>10} {:>8} {:>8} {:>10}",
        "turn", "prompt", "cached", "cached%", "TTFT ms"
    );
    let opt = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_else(|| "?".into());
    for t in &m.turns {
        let _ = writeln!(
            s,
            "  {:>4} {:>10} {:>8} {:>7.1}% {:>10}{}",
            t.turn,
            opt(t.prompt_tokens),
            opt(t.cached_tokens),
            t.cached_fraction * 100.0,
            t.ttft_ms
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "-".into()),
            if t.ok { "" } else { "  FAILED" }
        );
    }
    dist_row(s, "TTFT all turns", &m.ttft_ms, "ms");
    dist_row(s, "inter-token gap", &m.gap_ms, "ms");
    let _ = writeln!(
        s,
        "  {:<26} {} tokens in {:.3} s = {:.2} tok/s",
        "generated", m.generated_tokens, m.wall_s, m.tok_per_s
    );
}

/// Runs the multi-turn workload. `client.config.model` should already be resolved.
pub async fn run_multi_turn(
    client: &Client,
    cfg: &MultiTurnConfig,
    pb: &ProgressBar,
) -> Result<BenchReport> {
    if cfg.turns == 0 || cfg.reply_tokens == 0 {
        bail!("multi-turn: turns and reply must be at least 1");
    }
    let run = run_id();
    let ext = if cfg.sessions {
        pb.set_message("checking inferd extensions");
        client.check_extensions(&run).await?;
        Ext::session(&run, 0)
    } else {
        Ext::default()
    };
    let corpus = Corpus::new(cfg.seed);
    pb.set_message("calibrating");
    let mode = PromptMode::prepare(client, &corpus, cfg.token_prompts).await?;
    pb.set_length(cfg.turns as u64);
    pb.set_position(0);
    pb.set_message("turn 0");
    pb.reset_elapsed();

    let mut conv = Conversation::new(&corpus, 0, cfg.context_tokens, &mode);
    let clock = Clock::start();
    let mut records = Vec::with_capacity(cfg.turns);
    for turn in 0..cfg.turns {
        let meta = RequestMeta {
            agent: 0,
            turn,
            role: "agent",
        };
        let reply = client
            .stream_ext(
                &conv.prompt(),
                cfg.reply_tokens,
                &ext,
                &clock,
                meta,
                &mut |_| {},
            )
            .await;
        pb.inc(1);
        pb.set_message(format!("turn {}", turn + 1));
        // A failed turn still advances, as in the fleet workload.
        conv.advance(&corpus, 0, turn, &reply);
        records.push(reply.record);
    }
    if cfg.sessions {
        check_refusals(&records, "inferd.session")?;
    }
    let wall_us = run_end_us(&records);
    let summary = MultiTurnSummary::from_records(&records, wall_us);
    Ok(BenchReport::new(
        client.config.clone(),
        mode.calibration().cloned(),
        Workload::MultiTurn {
            config: cfg.clone(),
            summary,
        },
        records,
    ))
}
