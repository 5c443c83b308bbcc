//! The forked workload: one shared brief of B tokens is sent once (a timed warm-up request of
//! `max_tokens` 1), then N agents are released together, each with the same brief plus its own
//! S-token suffix. Measures the brief's TTFT, the relaunch time (release to the last agent's
//! first token), the agents' TTFTs and how much of each agent's prompt the server served from
//! its prefix cache (`usage.prompt_tokens_details.cached_tokens`).
//!
//! With `pin_brief` (inferd only) the brief is not sent as a warm-up request: it is created as a
//! pinned context (`POST /v1/contexts`, timed on its own), each agent sends only its suffix with
//! `"inferd": {"context": ID}`, and the context is deleted at the end.

use crate::agent::{PromptMode, TOKEN_ID_RANGE};
use crate::calibrate::{first_turn_messages, FIRST_QUESTION};
use crate::client::{Client, Message, Prompt, RequestMeta};
use crate::corpus::{Corpus, Rng};
use crate::extensions::{check_refusals, run_id, Ext, PinnedContext};
use crate::record::{rate, run_end_us, Clock, Dist, ErrorCounts, RequestRecord};
use crate::report::{dist_row, BenchReport, Workload};
use anyhow::{bail, Result};
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Derivation labels of the brief's and the suffixes' text streams (apart from the corpus's).
const PURPOSE_BRIEF: u64 = 102;
const PURPOSE_SUFFIX: u64 = 103;
/// Token-id stream of the brief (agents' streams are their indices).
const BRIEF_STREAM: u64 = u64::MAX;
/// Token-id part of an agent's suffix (the fleet's parts are small).
const SUFFIX_PART: u64 = 1 << 32;
/// The text before the brief's words, and the words before each suffix's ("Task of agent N.").
const BRIEF_HEADER: &str = "You are one agent of a team. The shared brief:\n";
const SUFFIX_HEADER_WORDS: usize = 4;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkedConfig {
    pub agents: usize,
    /// The shared brief (tokens).
    pub brief_tokens: usize,
    /// Each agent's own suffix after the brief (tokens).
    pub suffix_tokens: usize,
    /// `max_tokens` of each agent's reply.
    pub reply_tokens: u32,
    pub token_prompts: bool,
    pub seed: u64,
    /// The brief is a pinned inferd context (`POST /v1/contexts`) that agents' requests
    /// continue with `inferd.context`, instead of a warm-up request and a repeated prefix.
    #[serde(default)]
    pub pin_brief: bool,
}

impl Default for ForkedConfig {
    fn default() -> Self {
        ForkedConfig {
            agents: 8,
            brief_tokens: 4096,
            suffix_tokens: 64,
            reply_tokens: 64,
            token_prompts: false,
            seed: 1,
            pin_brief: false,
        }
    }
}

/// One agent's request: its TTFT and prefix-cache hit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentCache {
    pub agent: usize,
    pub ttft_ms: Option<f64>,
    /// usage.prompt_tokens.
    pub prompt_tokens: Option<u64>,
    /// usage.prompt_tokens_details.cached_tokens.
    pub cached_tokens: Option<u64>,
    /// cached_tokens / prompt_tokens (0 when the server reports either not).
    pub cached_fraction: f64,
    pub ok: bool,
}

impl AgentCache {
    pub fn of(r: &RequestRecord) -> Self {
        AgentCache {
            agent: r.agent,
            ttft_ms: r.ttft().map(|t| t as f64 / 1000.0),
            prompt_tokens: r.prompt_tokens,
            cached_tokens: r.cached_tokens,
            cached_fraction: r.cached_fraction(),
            ok: r.ok(),
        }
    }
}

/// Mean of the agents' cached fractions (0 for none).
pub(crate) fn mean_cached_fraction(rows: &[AgentCache]) -> f64 {
    if rows.is_empty() {
        return 0.0;
    }
    rows.iter().map(|a| a.cached_fraction).sum::<f64>() / rows.len() as f64
}

/// Rows of [`AgentCache`]s.
pub(crate) fn agent_cache_rows(s: &mut String, rows: &[AgentCache]) {
    let _ = writeln!(
        s,
        "  {:>5} {:>10} {:>8} {:>8} {:>10}",
        "agent", "prompt", "cached", "cached%", "TTFT ms"
    );
    let opt = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_else(|| "?".into());
    for t in rows {
        let _ = writeln!(
            s,
            "  {:>5} {:>10} {:>8} {:>7.1}% {:>10}{}",
            t.agent,
            opt(t.prompt_tokens),
            opt(t.cached_tokens),
            t.cached_fraction * 100.0,
            t.ttft_ms
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "-".into()),
            if t.ok { "" } else { "  FAILED" }
        );
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkedSummary {
    /// All requests, the brief's included.
    pub requests: usize,
    pub ok_requests: usize,
    pub errors: ErrorCounts,
    pub generated_tokens: u64,
    /// Run start to the end of the last request.
    pub wall_s: f64,
    /// generated_tokens / wall_s.
    pub tok_per_s: f64,
    /// TTFT of the brief's warm-up request (the first prefill of the brief).
    pub brief_ttft_ms: Option<f64>,
    /// usage.prompt_tokens of the brief's request.
    pub brief_prompt_tokens: Option<u64>,
    /// When the agents were released, s since the run's start.
    pub release_s: f64,
    /// From the release to the last agent's first token (none if an agent got no token).
    pub relaunch_ms: Option<f64>,
    /// The agents' TTFTs.
    pub ttft_ms: Dist,
    pub gap_ms: Dist,
    /// Mean of the agents' cached fractions.
    pub mean_cached_fraction: f64,
    pub agents: Vec<AgentCache>,
    /// The brief's pinned context (`pin_brief`): its creation time and length, apart from the
    /// agents' requests.
    #[serde(default)]
    pub pinned: Option<PinnedContext>,
}

impl ForkedSummary {
    /// `records`: the brief's request (role "brief") and the agents' (role "agent").
    pub fn from_records(records: &[RequestRecord], release_us: u64, wall_us: u64) -> Self {
        let generated_tokens: u64 = records.iter().map(|r| r.completion_tokens).sum();
        let wall_s = wall_us as f64 / 1e6;
        let brief = records.iter().find(|r| r.role == "brief");
        let agents: Vec<&RequestRecord> = records.iter().filter(|r| r.role == "agent").collect();
        let firsts: Option<Vec<u64>> = agents.iter().map(|r| r.first_token_us).collect();
        let rows: Vec<AgentCache> = agents.iter().map(|r| AgentCache::of(r)).collect();
        ForkedSummary {
            requests: records.len(),
            ok_requests: records.iter().filter(|r| r.ok()).count(),
            errors: ErrorCounts::of(records),
            generated_tokens,
            wall_s,
            tok_per_s: rate(generated_tokens, wall_s),
            brief_ttft_ms: brief.and_then(|r| r.ttft()).map(|t| t as f64 / 1000.0),
            brief_prompt_tokens: brief.and_then(|r| r.prompt_tokens),
            release_s: release_us as f64 / 1e6,
            relaunch_ms: firsts
                .filter(|f| !f.is_empty())
                .and_then(|f| f.into_iter().max())
                .map(|t| t.saturating_sub(release_us) as f64 / 1000.0),
            ttft_ms: Dist::from_us(agents.iter().filter_map(|r| r.ttft())),
            gap_ms: Dist::from_us(agents.iter().flat_map(|r| r.gaps_us())),
            mean_cached_fraction: mean_cached_fraction(&rows),
            agents: rows,
            pinned: None,
        }
    }
}

pub(crate) fn table(s: &mut String, c: &ForkedConfig, m: &ForkedSummary) {
    let _ = writeln!(
        s,
        "forked  {} agents on one {}-token brief, suffix {} tokens{}, reply {} tokens",
        c.agents,
        c.brief_tokens,
        c.suffix_tokens,
        if c.token_prompts { " (token ids)" } else { "" },
        c.reply_tokens
    );
    let opt_ms = |v: Option<f64>| match v {
        Some(x) => format!("{x:.1} ms"),
        None => "n/a".into(),
    };
    let tokens = |t: Option<u64>| t.map(|t| t.to_string()).unwrap_or_else(|| "?".into());
    match &m.pinned {
        None => {
            let _ = writeln!(
                s,
                "  {:<26} {} ({} prompt tokens)",
                "brief TTFT (first prefill)",
                opt_ms(m.brief_ttft_ms),
                tokens(m.brief_prompt_tokens)
            );
        }
        Some(p) => {
            let _ = writeln!(
                s,
                "  {:<26} {:.1} ms ({} tokens, POST /v1/contexts)",
                "brief pinned in",
                p.create_ms,
                tokens(p.tokens)
            );
            if let Some(e) = &p.delete_error {
                let _ = writeln!(s, "  WARNING: DELETE /v1/contexts/{} failed: {e}", p.id);
            }
        }
    }
    let _ = writeln!(
        s,
        "  {:<26} {}",
        "relaunch (to last token)",
        opt_ms(m.relaunch_ms)
    );
    dist_row(s, "TTFT agents", &m.ttft_ms, "ms");
    dist_row(s, "inter-token gap", &m.gap_ms, "ms");
    let _ = writeln!(
        s,
        "  {:<26} {:.1}%",
        "mean cached fraction",
        m.mean_cached_fraction * 100.0
    );
    agent_cache_rows(s, &m.agents);
    let _ = writeln!(
        s,
        "  {:<26} {} tokens in {:.3} s = {:.2} tok/s",
        "generated", m.generated_tokens, m.wall_s, m.tok_per_s
    );
}

/// The brief's prompt alone, and each agent's (brief + suffix).
pub(crate) fn forked_prompts(
    corpus: &Corpus,
    mode: &PromptMode,
    brief_tokens: usize,
    suffix_tokens: usize,
    agents: usize,
) -> (Prompt, Vec<Prompt>) {
    match mode {
        PromptMode::Chat(cal) => {
            // The warm-up is shaped like a calibrated turn-0 request (system text, then the
            // first question), so it comes out at about `brief_tokens`; each agent's prompt is
            // the warm-up plus one user message of about `suffix_tokens`.
            let calibrated_header = first_turn_messages(0, String::new())[0]
                .content
                .split_whitespace()
                .count();
            let words = (cal.words_for(brief_tokens) + calibrated_header)
                .saturating_sub(BRIEF_HEADER.split_whitespace().count())
                .max(1);
            let mut rng = Rng::derive(corpus.seed, &[PURPOSE_BRIEF]);
            let brief = vec![
                Message::new(
                    "system",
                    format!("{BRIEF_HEADER}{}", Corpus::words(&mut rng, words)),
                ),
                Message::new("user", FIRST_QUESTION),
            ];
            let suffix_words = ((suffix_tokens as f64 / cal.tokens_per_word).round() as usize)
                .saturating_sub(SUFFIX_HEADER_WORDS)
                .max(1);
            let prompts = (0..agents)
                .map(|a| {
                    let mut rng = Rng::derive(corpus.seed, &[PURPOSE_SUFFIX, a as u64]);
                    let user = format!(
                        "Task of agent {a}. {}",
                        Corpus::words(&mut rng, suffix_words)
                    );
                    let mut m = brief.clone();
                    m.push(Message::new("user", user));
                    Prompt::Chat(m)
                })
                .collect();
            (Prompt::Chat(brief), prompts)
        }
        PromptMode::Tokens => {
            let (lo, hi) = TOKEN_ID_RANGE;
            let brief = corpus.token_ids(BRIEF_STREAM, 0, brief_tokens, lo, hi);
            let prompts = (0..agents)
                .map(|a| {
                    let mut p = brief.clone();
                    p.extend(corpus.token_ids(a as u64, SUFFIX_PART, suffix_tokens, lo, hi));
                    Prompt::Tokens(p)
                })
                .collect();
            (Prompt::Tokens(brief), prompts)
        }
    }
}

/// An agent's chat prompt without its first `brief_len` messages (the pinned brief).
fn continuation(prompt: &Prompt, brief_len: usize) -> Prompt {
    match prompt {
        Prompt::Chat(m) => Prompt::Chat(m[brief_len.min(m.len())..].to_vec()),
        other => other.clone(),
    }
}

/// Runs the forked workload. `client.config.model` should already be resolved.
pub async fn run_forked(
    client: &Client,
    cfg: &ForkedConfig,
    pb: &ProgressBar,
) -> Result<BenchReport> {
    if cfg.agents == 0 || cfg.reply_tokens == 0 || cfg.brief_tokens == 0 {
        bail!("forked: agents, brief and reply must be at least 1");
    }
    if cfg.pin_brief && cfg.token_prompts {
        bail!("forked: --pin-brief needs chat prompts (a context is made of messages), not --token-prompts");
    }
    let corpus = Corpus::new(cfg.seed);
    pb.set_message("calibrating");
    let mode = PromptMode::prepare(client, &corpus, cfg.token_prompts).await?;
    let (brief, mut prompts) = forked_prompts(
        &corpus,
        &mode,
        cfg.brief_tokens,
        cfg.suffix_tokens,
        cfg.agents,
    );
    pb.set_length(cfg.agents as u64 + 1);
    pb.set_position(0);
    pb.set_message("brief");
    pb.reset_elapsed();

    let clock = Clock::start();
    let mut records = Vec::with_capacity(cfg.agents + 1);
    let mut pinned = None;
    let mut ext = Ext::default();
    match &brief {
        Prompt::Chat(brief_messages) if cfg.pin_brief => {
            let ctx = client
                .create_context(&format!("{}-brief", run_id()), brief_messages, true)
                .await?;
            ext = Ext::context(&ctx.id);
            for p in &mut prompts {
                *p = continuation(p, brief_messages.len());
            }
            pinned = Some(ctx);
        }
        _ => {
            let meta = RequestMeta {
                agent: 0,
                turn: 0,
                role: "brief",
            };
            let warm = client.stream(&brief, 1, &clock, meta, &mut |_| {}).await;
            records.push(warm.record);
        }
    }
    pb.inc(1);
    pb.set_message("agents");

    let release_us = clock.now_us();
    let mut handles = Vec::with_capacity(cfg.agents);
    for (agent, prompt) in prompts.into_iter().enumerate() {
        let (client, pb, ext) = (client.clone(), pb.clone(), ext.clone());
        let reply_tokens = cfg.reply_tokens;
        handles.push(tokio::spawn(async move {
            let meta = RequestMeta {
                agent,
                turn: 0,
                role: "agent",
            };
            let reply = client
                .stream_ext(&prompt, reply_tokens, &ext, &clock, meta, &mut |_| {})
                .await;
            pb.inc(1);
            reply.record
        }));
    }
    for h in handles {
        records.push(h.await?);
    }
    if let Some(ctx) = &mut pinned {
        client.delete_context(ctx).await;
        check_refusals(&records, "inferd.context")?;
    }
    let wall_us = run_end_us(&records);
    let mut summary = ForkedSummary::from_records(&records, release_us, wall_us);
    summary.pinned = pinned;
    Ok(BenchReport::new(
        client.config.clone(),
        mode.calibration().cloned(),
        Workload::Forked {
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
    fn token_prompts_share_the_brief_and_differ_after_it() {
        let corpus = Corpus::new(3);
        let (brief, agents) = forked_prompts(&corpus, &PromptMode::Tokens, 100, 10, 3);
        let Prompt::Tokens(b) = brief else { panic!() };
        assert_eq!(b.len(), 100);
        let tails: Vec<Vec<u32>> = agents
            .iter()
            .map(|p| {
                let Prompt::Tokens(t) = p else { panic!() };
                assert_eq!(t.len(), 110);
                assert_eq!(t[..100], b[..]);
                t[100..].to_vec()
            })
            .collect();
        assert_ne!(tails[0], tails[1]);
        assert_ne!(tails[1], tails[2]);
    }
}
