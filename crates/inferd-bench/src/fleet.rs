//! The fleet workload: N agents released together, each with its own context, each running T
//! turns of R-token replies; optionally as JSON matching a schema, held to it or only asked
//! for ([`crate::structured`]).

use crate::agent::{Conversation, PromptMode};
use crate::client::{Client, RequestMeta};
use crate::corpus::Corpus;
use crate::extensions::{check_refusals, run_id, Ext};
use crate::record::{rate, run_end_us, Clock, Dist, ErrorCounts, RequestRecord};
use crate::report::{BenchReport, Workload};
use crate::structured;
use anyhow::{bail, Result};
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::Barrier;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetConfig {
    pub agents: usize,
    /// Turn-0 prompt size in the server's tokens (chat: calibrated, approximate).
    pub context_tokens: usize,
    pub turns: usize,
    /// `max_tokens` of every reply.
    pub reply_tokens: u32,
    /// `/v1/completions` with token-id prompts instead of chat messages.
    pub token_prompts: bool,
    /// Corpus seed (the same seed gives the same prompts).
    pub seed: u64,
    /// Each agent's requests carry `inferd.session` (an id unique to the run and the agent).
    #[serde(default)]
    pub sessions: bool,
    /// The JSON Schema the agents answer in (`--json-schema` / `--json-schema-prompt-only`):
    /// `"builtin"` or the schema file as given; `None`: free replies. Its text ends every
    /// user message ([`crate::structured`]).
    #[serde(default)]
    pub structured: Option<String>,
    /// The schema is only asked for in the prompt: no `response_format` (the unconstrained
    /// twin of a `--json-schema` run).
    #[serde(default)]
    pub prompt_only: bool,
    /// The schema itself (set with `structured`).
    #[serde(default)]
    pub schema: Option<Value>,
}

impl FleetConfig {
    /// The reply is held to the schema (`response_format` sent).
    pub fn constrained(&self) -> bool {
        self.schema.is_some() && !self.prompt_only
    }
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            agents: 4,
            context_tokens: 512,
            turns: 1,
            reply_tokens: 64,
            token_prompts: false,
            seed: 1,
            sessions: false,
            structured: None,
            prompt_only: false,
            schema: None,
        }
    }
}

/// Per-agent totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSummary {
    pub agent: usize,
    /// Turn-0 time to first token.
    pub ttft_ms: Option<f64>,
    /// When the agent's first token (of any turn) arrived, since release.
    pub first_token_s: Option<f64>,
    /// When its last request ended.
    pub done_s: f64,
    pub tokens: u64,
    pub errors: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetSummary {
    pub requests: usize,
    pub ok_requests: usize,
    pub errors: ErrorCounts,
    /// Successful replies with fewer than `reply_tokens` tokens (the server stopped at EOS).
    pub short_replies: usize,
    /// All agents' generated tokens (failed requests count the chunks they got).
    pub generated_tokens: u64,
    /// Release to the end of the last request.
    pub wall_s: f64,
    /// generated_tokens / wall_s.
    pub tok_per_s: f64,
    /// usage.prompt_tokens of turn-0 requests (plain token counts).
    pub prompt_tokens_turn0: Dist,
    /// Turn-0 TTFT of each agent.
    pub ttft_turn0_ms: Dist,
    pub ttft_all_ms: Dist,
    /// Gaps between consecutive text chunks of every request.
    pub gap_ms: Dist,
    pub worst_gap_ms: f64,
    /// When the last agent (of those that got one) received its first token.
    pub last_first_token_s: Option<f64>,
    pub agents_without_token: usize,
    pub agents: Vec<AgentSummary>,
    /// Runs with a schema: successful replies, and those whose whole text parses as JSON
    /// ([`structured::is_json`]; not validated against the schema). `None` otherwise.
    #[serde(default)]
    pub json_replies: Option<usize>,
    #[serde(default)]
    pub json_valid: Option<usize>,
}

impl FleetSummary {
    pub fn from_records(records: &[RequestRecord], n_agents: usize, wall_us: u64) -> Self {
        let generated_tokens: u64 = records.iter().map(|r| r.completion_tokens).sum();
        let wall_s = wall_us as f64 / 1e6;
        let agents: Vec<AgentSummary> = (0..n_agents)
            .map(|a| {
                let mine: Vec<&RequestRecord> = records.iter().filter(|r| r.agent == a).collect();
                AgentSummary {
                    agent: a,
                    ttft_ms: mine
                        .iter()
                        .find(|r| r.turn == 0)
                        .and_then(|r| r.ttft())
                        .map(|t| t as f64 / 1000.0),
                    first_token_s: mine
                        .iter()
                        .filter_map(|r| r.first_token_us)
                        .min()
                        .map(|t| t as f64 / 1e6),
                    done_s: mine.iter().map(|r| r.end_us).max().unwrap_or(0) as f64 / 1e6,
                    tokens: mine.iter().map(|r| r.completion_tokens).sum(),
                    errors: mine.iter().filter(|r| !r.ok()).count(),
                }
            })
            .collect();
        let gaps: Vec<u64> = records.iter().flat_map(|r| r.gaps_us()).collect();
        let gap_ms = Dist::from_us(gaps.iter().copied());
        FleetSummary {
            requests: records.len(),
            ok_requests: records.iter().filter(|r| r.ok()).count(),
            errors: ErrorCounts::of(records),
            short_replies: records.iter().filter(|r| r.short()).count(),
            generated_tokens,
            wall_s,
            tok_per_s: rate(generated_tokens, wall_s),
            prompt_tokens_turn0: Dist::from_values(
                records
                    .iter()
                    .filter(|r| r.turn == 0)
                    .filter_map(|r| r.prompt_tokens)
                    .map(|p| p as f64),
            ),
            ttft_turn0_ms: Dist::from_us(
                records
                    .iter()
                    .filter(|r| r.turn == 0)
                    .filter_map(|r| r.ttft()),
            ),
            ttft_all_ms: Dist::from_us(records.iter().filter_map(|r| r.ttft())),
            worst_gap_ms: gap_ms.max,
            gap_ms,
            last_first_token_s: agents
                .iter()
                .filter_map(|a| a.first_token_s)
                .max_by(|a, b| a.total_cmp(b)),
            agents_without_token: agents.iter().filter(|a| a.first_token_s.is_none()).count(),
            agents,
            json_replies: None,
            json_valid: None,
        }
    }
}

/// Runs the fleet workload. `client.config.model` should already be resolved.
pub async fn run_fleet(
    client: &Client,
    cfg: &FleetConfig,
    pb: &ProgressBar,
) -> Result<BenchReport> {
    if cfg.agents == 0 || cfg.turns == 0 || cfg.reply_tokens == 0 {
        bail!("fleet: agents, turns and reply must be at least 1");
    }
    if cfg.structured.is_some() != cfg.schema.is_some() {
        bail!("fleet: a structured run needs both its schema's name and the schema");
    }
    if cfg.prompt_only && cfg.schema.is_none() {
        bail!("fleet: prompt_only needs a schema");
    }
    if cfg.schema.is_some() && cfg.token_prompts {
        bail!("--json-schema needs chat prompts (its instruction is text): drop --token-prompts");
    }
    let run = run_id();
    if cfg.sessions {
        pb.set_message("checking inferd extensions");
        client.check_extensions(&run).await?;
    }
    let corpus = Corpus::new(cfg.seed);
    pb.set_message("calibrating");
    let mode = PromptMode::prepare(client, &corpus, cfg.token_prompts).await?;
    let n = cfg.agents;
    pb.set_length((n * cfg.turns) as u64);
    pb.set_position(0);
    pb.set_message("0 tokens");
    pb.reset_elapsed();

    let tokens = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(n));
    let clock = Clock::start();
    let mut handles = Vec::with_capacity(n);
    for agent in 0..n {
        let mut conv = Conversation::new(&corpus, agent, cfg.context_tokens, &mode);
        let mut ext = if cfg.sessions {
            Ext::session(&run, agent)
        } else {
            Ext::default()
        };
        if let Some(schema) = &cfg.schema {
            conv.append_to_user_turn(&structured::instruction(schema));
            if !cfg.prompt_only {
                ext.response_format = Some(structured::response_format(schema));
            }
        }
        let (client, corpus, cfg) = (client.clone(), corpus.clone(), cfg.clone());
        let (tokens, barrier, pb) = (tokens.clone(), barrier.clone(), pb.clone());
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut records = Vec::with_capacity(cfg.turns);
            // Per successful reply: whether it parses as JSON (runs with a schema).
            let mut json = Vec::new();
            for turn in 0..cfg.turns {
                let meta = RequestMeta {
                    agent,
                    turn,
                    role: "agent",
                };
                let mut on_chunk = |_| {
                    let t = tokens.fetch_add(1, Ordering::Relaxed) + 1;
                    if t % 16 == 0 {
                        pb.set_message(format!("{t} tokens"));
                    }
                };
                let reply = client
                    .stream_ext(
                        &conv.prompt(),
                        cfg.reply_tokens,
                        &ext,
                        &clock,
                        meta,
                        &mut on_chunk,
                    )
                    .await;
                pb.inc(1);
                if cfg.schema.is_some() && reply.record.ok() {
                    json.push(structured::is_json(&reply.text));
                }
                // A failed turn still advances (its partial reply, if any, and the next user
                // message), so the agent keeps its place in the load.
                conv.advance(&corpus, agent, turn, &reply);
                if cfg.schema.is_some() {
                    conv.append_to_user_turn(structured::REMINDER);
                }
                records.push(reply.record);
            }
            (records, json)
        }));
    }
    let mut records = Vec::with_capacity(n * cfg.turns);
    let mut json = Vec::new();
    for h in handles {
        let (r, j) = h.await?;
        records.extend(r);
        json.extend(j);
    }
    if cfg.sessions {
        check_refusals(&records, "inferd.session")?;
    }
    let wall_us = run_end_us(&records);
    pb.set_message(format!("{} tokens", tokens.load(Ordering::Relaxed)));
    let mut summary = FleetSummary::from_records(&records, n, wall_us);
    if cfg.schema.is_some() {
        summary.json_replies = Some(json.len());
        summary.json_valid = Some(json.iter().filter(|&&v| v).count());
    }
    Ok(BenchReport::new(
        client.config.clone(),
        mode.calibration().cloned(),
        Workload::Fleet {
            config: cfg.clone(),
            summary,
        },
        records,
    ))
}
