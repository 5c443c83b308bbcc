//! The JSON report of a run (config, summary, every request) and its text rendering.

use crate::arrivals::{ArrivalsConfig, ArrivalsSummary};
use crate::calibrate::Calibration;
use crate::client::ClientConfig;
use crate::fleet::{FleetConfig, FleetSummary};
use crate::forked::{ForkedConfig, ForkedSummary};
use crate::multi_turn::{MultiTurnConfig, MultiTurnSummary};
use crate::record::{Dist, ErrorCounts, RequestRecord};
use crate::resume::{ResumeConfig, ResumeSummary};
use crate::stall::{StallConfig, StallSummary};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Bumped when the report's shape changes incompatibly.
pub const REPORT_FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    Fleet {
        config: FleetConfig,
        summary: FleetSummary,
    },
    Stall {
        config: StallConfig,
        summary: StallSummary,
    },
    Arrivals {
        config: ArrivalsConfig,
        summary: ArrivalsSummary,
    },
    MultiTurn {
        config: MultiTurnConfig,
        summary: MultiTurnSummary,
    },
    Forked {
        config: ForkedConfig,
        summary: ForkedSummary,
    },
    Resume {
        config: ResumeConfig,
        summary: ResumeSummary,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub format: u32,
    /// Version of the tool that wrote the report.
    pub tool: String,
    /// Free label (e.g. the engine's name) to tell reports apart.
    pub label: Option<String>,
    /// Free key/value notes (`--meta model=NAME --meta engine=NAME`); `table` groups by
    /// `model` and names rows by `engine` (falling back to the server's model id and `label`).
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
    /// Unix time the run started, seconds.
    pub started_unix_s: u64,
    pub server: ClientConfig,
    pub calibration: Option<Calibration>,
    pub workload: Workload,
    /// Every request of the run (calibration probes excluded), in completion order per agent.
    pub requests: Vec<RequestRecord>,
}

impl BenchReport {
    pub fn new(
        server: ClientConfig,
        calibration: Option<Calibration>,
        workload: Workload,
        requests: Vec<RequestRecord>,
    ) -> Self {
        BenchReport {
            format: REPORT_FORMAT,
            tool: format!("inferd-bench {}", env!("CARGO_PKG_VERSION")),
            label: None,
            meta: BTreeMap::new(),
            started_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            server,
            calibration,
            workload,
            requests,
        }
    }

    pub fn errors(&self) -> &ErrorCounts {
        match &self.workload {
            Workload::Fleet { summary, .. } => &summary.errors,
            Workload::Stall { summary, .. } => &summary.errors,
            Workload::Arrivals { summary, .. } => &summary.errors,
            Workload::MultiTurn { summary, .. } => &summary.errors,
            Workload::Forked { summary, .. } => &summary.errors,
            Workload::Resume { summary, .. } => &summary.errors,
        }
    }

    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    pub fn from_json(s: &str) -> Result<Self> {
        Ok(serde_json::from_str(s)?)
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(path, self.to_json()?).with_context(|| format!("writing {}", path.display()))
    }

    /// A human-readable summary table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let model = self.server.model.as_deref().unwrap_or("(server default)");
        let _ = writeln!(s, "server  {}  model {}", self.server.url, model);
        if let Some(x) = self.extensions() {
            let _ = writeln!(s, "inferd extensions  {}", x.describe());
        }
        if let Some((x, name)) = self.structured() {
            let _ = writeln!(s, "structured replies  {name}: {}", x.describe());
        }
        if let Some(c) = &self.calibration {
            let _ = writeln!(
                s,
                "calibration  {:.3} tokens/word, {:.1} tokens of overhead",
                c.tokens_per_word, c.overhead_tokens
            );
        }
        match &self.workload {
            Workload::Fleet { config, summary } => fleet_table(&mut s, config, summary),
            Workload::Stall { config, summary } => stall_table(&mut s, config, summary),
            Workload::Arrivals { config, summary } => {
                crate::arrivals::table(&mut s, config, summary)
            }
            Workload::MultiTurn { config, summary } => {
                crate::multi_turn::table(&mut s, config, summary)
            }
            Workload::Forked { config, summary } => crate::forked::table(&mut s, config, summary),
            Workload::Resume { config, summary } => crate::resume::table(&mut s, config, summary),
        }
        errors_table(&mut s, self.errors());
        s
    }
}

pub(crate) fn dist_row(s: &mut String, name: &str, d: &Dist, unit: &str) {
    if d.n == 0 {
        let _ = writeln!(s, "  {name:<26} (none)");
        return;
    }
    let _ = writeln!(
        s,
        "  {name:<26} mean {:>9.1}  p50 {:>9.1}  p90 {:>9.1}  max {:>9.1} {unit}  (n={})",
        d.mean, d.p50, d.p90, d.max, d.n
    );
}

fn fleet_table(s: &mut String, c: &FleetConfig, m: &FleetSummary) {
    let _ = writeln!(
        s,
        "fleet  {} agents x {} turns, context {} tokens{}, reply {} tokens",
        c.agents,
        c.turns,
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
        "  {:<26} {} tokens in {:.3} s = {:.2} tok/s",
        "generated", m.generated_tokens, m.wall_s, m.tok_per_s
    );
    if m.short_replies > 0 && c.constrained() {
        let _ = writeln!(
            s,
            "  NOTE: {} replies ended before {} tokens (a constrained reply ends where its \
             JSON is complete, ignore_eos or not): compare tok/s and gaps, not wall time",
            m.short_replies, c.reply_tokens
        );
    } else if m.short_replies > 0 {
        let _ = writeln!(
            s,
            "  NOTE: {} replies ended before {} tokens (the server did not ignore EOS): \
             not a like-for-like comparison",
            m.short_replies, c.reply_tokens
        );
    }
    if let (Some(n), Some(v)) = (m.json_replies, m.json_valid) {
        let _ = writeln!(
            s,
            "  {:<26} {v} of {n} replies parse as JSON",
            "JSON replies"
        );
    }
    dist_row(s, "prompt tokens (turn 0)", &m.prompt_tokens_turn0, "tok");
    dist_row(s, "TTFT per agent (turn 0)", &m.ttft_turn0_ms, "ms");
    if c.turns > 1 {
        dist_row(s, "TTFT all turns", &m.ttft_all_ms, "ms");
    }
    dist_row(s, "inter-token gap", &m.gap_ms, "ms");
    let _ = writeln!(
        s,
        "  {:<26} {}",
        "last agent's first token",
        match m.last_first_token_s {
            Some(t) => format!("{t:.3} s"),
            None => "never".into(),
        }
    );
    if m.agents_without_token > 0 {
        let _ = writeln!(
            s,
            "  {:<26} {}",
            "agents with no token", m.agents_without_token
        );
    }
    let _ = writeln!(s, "  {:<26} {:.3} s", "all done", m.wall_s);
    let _ = writeln!(
        s,
        "  {:<26} {:.1} ms",
        "worst inter-token gap", m.worst_gap_ms
    );
}

fn stall_table(s: &mut String, c: &StallConfig, m: &StallSummary) {
    let _ = writeln!(
        s,
        "stall  {} decoding agents (context {}, reply {} tokens), then one {}-token prompt",
        c.agents, c.context_tokens, c.reply_tokens, c.long_prompt_tokens
    );
    let opt = |v: Option<f64>, unit: &str| match v {
        Some(x) => format!("{x:.1} {unit}"),
        None => "n/a".to_string(),
    };
    let _ = writeln!(
        s,
        "  {:<36} {} (usage)",
        "long prompt tokens",
        m.long_prompt_tokens
            .map(|t| t.to_string())
            .unwrap_or_else(|| "?".into())
    );
    let _ = writeln!(
        s,
        "  {:<36} {:.3} s",
        "long prompt sent at", m.long_arrival_s
    );
    let _ = writeln!(
        s,
        "  {:<36} {}",
        "long prompt TTFT",
        opt(m.long_ttft_ms, "ms")
    );
    let _ = writeln!(
        s,
        "  {:<36} {}",
        "decode gap before it (median)",
        opt(m.baseline_gap_p50_ms, "ms")
    );
    let _ = writeln!(
        s,
        "  {:<36} {}",
        "worst decode gap during its prefill",
        opt(m.worst_gap_during_prefill_ms, "ms")
    );
    let _ = writeln!(
        s,
        "  {:<36} {}",
        "stall ratio (worst / median)",
        m.stall_ratio
            .map(|r| format!("{r:.1}x"))
            .unwrap_or_else(|| "n/a".into())
    );
    let _ = writeln!(
        s,
        "  {:<36} {} of {}",
        "agents decoding through prefill", m.agents_decoding_through_prefill, c.agents
    );
    if c.short_arrivals > 0 {
        let mut t: Vec<f64> = m.short_ttft_ms.iter().flatten().copied().collect();
        t.sort_by(|a, b| a.total_cmp(b));
        let _ = writeln!(
            s,
            "  {:<36} {} x {} tokens, {} ms after the long prompt",
            "short arrivals", c.short_arrivals, c.short_prompt_tokens, c.short_after_ms
        );
        let p50 = (!t.is_empty()).then(|| crate::record::percentile(&t, 0.5));
        let _ = writeln!(
            s,
            "  {:<36} {} / {}",
            "short TTFT p50 / max",
            opt(p50, "ms"),
            opt(t.last().copied(), "ms")
        );
        let _ = writeln!(
            s,
            "  {:<36} {} of {}",
            "short first token before the long's", m.short_before_long, c.short_arrivals
        );
    }
    let _ = writeln!(
        s,
        "  {:<36} {} tokens in {:.3} s = {:.2} tok/s",
        "generated", m.generated_tokens, m.wall_s, m.tok_per_s
    );
    for w in &m.warnings {
        let _ = writeln!(s, "  WARNING: {w}");
    }
}

fn errors_table(s: &mut String, e: &ErrorCounts) {
    if e.total == 0 {
        let _ = writeln!(s, "  no errors");
        return;
    }
    let _ = writeln!(
        s,
        "  THIS RUN HAD {} FAILED REQUEST(S): connect {}, http {}, timeout {}, stream {}, protocol {}",
        e.total, e.connect, e.http, e.timeout, e.stream, e.protocol
    );
    for x in &e.examples {
        let _ = writeln!(s, "    {x}");
    }
}

impl BenchReport {
    /// `meta.model`, else the server's model id.
    pub fn model_name(&self) -> String {
        self.meta
            .get("model")
            .cloned()
            .or_else(|| self.server.model.clone())
            .unwrap_or_else(|| "?".into())
    }

    /// `meta.engine`, else the label, else the URL.
    pub fn engine_name(&self) -> String {
        self.meta
            .get("engine")
            .cloned()
            .or_else(|| self.label.clone())
            .unwrap_or_else(|| self.server.url.clone())
    }

    /// The inferd extensions the run used (from its config), if any.
    pub fn extensions(&self) -> Option<ExtensionsUsed> {
        match &self.workload {
            Workload::Fleet { config, .. } if config.sessions => Some(ExtensionsUsed::Sessions),
            Workload::MultiTurn { config, .. } if config.sessions => Some(ExtensionsUsed::Sessions),
            Workload::Resume { config, .. } if config.sessions => Some(ExtensionsUsed::Sessions),
            Workload::Forked { config, .. } if config.pin_brief => {
                Some(ExtensionsUsed::PinnedBrief)
            }
            _ => None,
        }
    }

    /// Whether the agents answered as JSON matching a schema (fleet `--json-schema` /
    /// `--json-schema-prompt-only`), and the schema's name (`builtin` or the file).
    pub fn structured(&self) -> Option<(StructuredUsed, &str)> {
        match &self.workload {
            Workload::Fleet { config, .. } => {
                let name = config.structured.as_deref()?;
                Some(match config.prompt_only {
                    true => (StructuredUsed::SchemaPrompt, name),
                    false => (StructuredUsed::JsonSchema, name),
                })
            }
            _ => None,
        }
    }

    /// The engine's name with the extensions and structured replies it used:
    /// `inferd +sessions`, `inferd +json-schema`, `inferd +schema-prompt`.
    pub fn engine_label(&self) -> String {
        let mut l = self.engine_name();
        if let Some(x) = self.extensions() {
            l = format!("{l} +{}", x.flag());
        }
        if let Some((x, _)) = self.structured() {
            l = format!("{l} +{}", x.label());
        }
        l
    }

    /// The workload's name as the command line spells it.
    pub fn workload_name(&self) -> &'static str {
        match &self.workload {
            Workload::Fleet { .. } => "fleet",
            Workload::Stall { .. } => "stall",
            Workload::Arrivals { .. } => "arrivals",
            Workload::MultiTurn { .. } => "multi-turn",
            Workload::Forked { .. } => "forked",
            Workload::Resume { .. } => "resume",
        }
    }
}

/// Which inferd extensions a run used (recorded in its config: `sessions`, `pin_brief`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtensionsUsed {
    /// `--sessions`: every agent's requests carried `inferd.session`.
    Sessions,
    /// `--pin-brief`: the brief was a pinned context the agents continued (`inferd.context`).
    PinnedBrief,
}

impl ExtensionsUsed {
    /// The command-line flag (without dashes).
    pub fn flag(self) -> &'static str {
        match self {
            ExtensionsUsed::Sessions => "sessions",
            ExtensionsUsed::PinnedBrief => "pin-brief",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            ExtensionsUsed::Sessions => "sessions (inferd.session on every agent request)",
            ExtensionsUsed::PinnedBrief => {
                "pinned brief (POST /v1/contexts; agents send inferd.context and their suffix)"
            }
        }
    }
}

/// How a fleet run's agents answered as JSON (recorded in its config: `structured`,
/// `prompt_only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StructuredUsed {
    /// `--json-schema`: asked in the prompt and held to the schema (`response_format`).
    JsonSchema,
    /// `--json-schema-prompt-only`: the same prompt, no `response_format`.
    SchemaPrompt,
}

impl StructuredUsed {
    /// How engine labels show it (`inferd +json-schema`).
    pub fn label(self) -> &'static str {
        match self {
            StructuredUsed::JsonSchema => "json-schema",
            StructuredUsed::SchemaPrompt => "schema-prompt",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            StructuredUsed::JsonSchema => {
                "JSON Schema in the prompt and as response_format (replies held to it)"
            }
            StructuredUsed::SchemaPrompt => {
                "JSON Schema in the prompt only (no response_format: replies free)"
            }
        }
    }
}

pub(crate) fn ratio(x: f64, base: Option<f64>) -> String {
    match base {
        Some(b) if b > 0.0 && x.is_finite() => format!("{:.2}", x / b),
        _ => "-".into(),
    }
}

fn ms(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into())
}

/// Markdown tables comparing reports: one for fleet runs, one for stall runs, then one per
/// other workload ([`crate::workload_tables`]). Rows with the same model and workload shape
/// are compared to the row whose engine is `baseline` (ratios: engine / baseline; tok/s higher
/// is better, TTFT lower is better). Engines are named with the inferd extensions they used
/// (`inferd +sessions`).
pub fn markdown_tables(reports: &[BenchReport], baseline: &str) -> String {
    let mut s = String::new();
    let mut fleet: Vec<(&BenchReport, &FleetConfig, &FleetSummary)> = reports
        .iter()
        .filter_map(|r| match &r.workload {
            Workload::Fleet { config, summary } => Some((r, config, summary)),
            _ => None,
        })
        .collect();
    fleet.sort_by_key(|(r, c, _)| {
        (
            r.model_name(),
            c.context_tokens,
            c.reply_tokens,
            c.turns,
            c.agents,
            r.engine_name() != baseline,
            r.engine_label(),
        )
    });
    if !fleet.is_empty() {
        // A JSON column when some run asked for JSON replies.
        let json = fleet.iter().any(|(_, _, m)| m.json_replies.is_some());
        let _ = writeln!(
            s,
            "| model | agents | ctx/reply/turns | engine | tok/s | TTFT p50 ms | TTFT max ms | \
             last first token s | worst gap ms | errors | short replies | {}tok/s ratio vs \
             {baseline} | TTFT p50 ratio |",
            if json { "JSON valid | " } else { "" }
        );
        let _ = writeln!(
            s,
            "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|{}---:|---:|",
            if json { "---:|" } else { "" }
        );
        for (r, c, m) in &fleet {
            let base = fleet_baseline(&fleet, r, c, baseline);
            let (tok_ratio, ttft_ratio) = match base {
                None => ("-".to_string(), "-".to_string()),
                Some(b) => (
                    ratio(m.tok_per_s, Some(b.tok_per_s)),
                    ratio(m.ttft_turn0_ms.p50, Some(b.ttft_turn0_ms.p50)),
                ),
            };
            let json_col = match (json, m.json_replies, m.json_valid) {
                (false, ..) => String::new(),
                (true, Some(n), Some(v)) => format!("{v}/{n} | "),
                (true, ..) => "- | ".to_string(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {}/{}/{} | {} | {:.1} | {:.0} | {:.0} | {} | {:.0} | {} | {} | {}{} | {} |",
                r.model_name(),
                c.agents,
                c.context_tokens,
                c.reply_tokens,
                c.turns,
                r.engine_label(),
                m.tok_per_s,
                m.ttft_turn0_ms.p50,
                m.ttft_turn0_ms.max,
                m.last_first_token_s
                    .map(|t| format!("{t:.2}"))
                    .unwrap_or_else(|| "-".into()),
                m.worst_gap_ms,
                m.errors.total,
                m.short_replies,
                json_col,
                tok_ratio,
                ttft_ratio
            );
        }
    }
    let mut stall: Vec<(&BenchReport, &StallConfig, &StallSummary)> = reports
        .iter()
        .filter_map(|r| match &r.workload {
            Workload::Stall { config, summary } => Some((r, config, summary)),
            _ => None,
        })
        .collect();
    stall.sort_by_key(|(r, c, _)| {
        (
            r.model_name(),
            c.agents,
            c.long_prompt_tokens,
            r.engine_name() != baseline,
            r.engine_name(),
        )
    });
    if !stall.is_empty() {
        if !s.is_empty() {
            s.push('\n');
        }
        let _ = writeln!(
            s,
            "| model | agents | long prompt | engine | long TTFT ms | median gap ms | \
             worst gap in prefill ms | stall ratio | decoding through | tok/s | errors |"
        );
        let _ = writeln!(s, "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|");
        for (r, c, m) in &stall {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {}/{} | {:.1} | {} |",
                r.model_name(),
                c.agents,
                m.long_prompt_tokens.unwrap_or(c.long_prompt_tokens as u64),
                r.engine_name(),
                ms(m.long_ttft_ms),
                m.baseline_gap_p50_ms
                    .map(|v| format!("{v:.1}"))
                    .unwrap_or_else(|| "-".into()),
                ms(m.worst_gap_during_prefill_ms),
                m.stall_ratio
                    .map(|v| format!("{v:.1}x"))
                    .unwrap_or_else(|| "-".into()),
                m.agents_decoding_through_prefill,
                c.agents,
                m.tok_per_s,
                m.errors.total
            );
        }
    }
    let rest = crate::workload_tables::workload_tables(reports, baseline);
    if !rest.is_empty() {
        if !s.is_empty() {
            s.push('\n');
        }
        s.push_str(&rest);
    }
    s
}

/// The fleet row a row's ratios divide by: another run of the baseline engine on the same
/// model, shape and prompts (the same schema, or none), without inferd extensions; of those,
/// one as constrained as the row, else an unconstrained one (`inferd +json-schema` against
/// `inferd +schema-prompt` with `--baseline inferd`). `None` when there is none.
fn fleet_baseline<'a>(
    fleet: &[(&BenchReport, &FleetConfig, &'a FleetSummary)],
    r: &BenchReport,
    c: &FleetConfig,
    baseline: &str,
) -> Option<&'a FleetSummary> {
    let shape = |c: &FleetConfig| {
        (
            c.agents,
            c.context_tokens,
            c.reply_tokens,
            c.turns,
            c.structured.clone(),
        )
    };
    fleet
        .iter()
        .filter(|(b, bc, _)| {
            !std::ptr::eq(*b, r)
                && b.engine_name() == baseline
                && b.extensions().is_none()
                && b.model_name() == r.model_name()
                && shape(bc) == shape(c)
        })
        .filter_map(|(_, bc, bm)| match (bc.constrained(), c.constrained()) {
            (x, y) if x == y => Some((0, *bm)),
            (false, true) => Some((1, *bm)),
            _ => None,
        })
        .min_by_key(|(rank, _)| *rank)
        .map(|(_, m)| m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(agent: usize, tokens: u64, end_us: u64) -> RequestRecord {
        RequestRecord {
            agent,
            turn: 0,
            role: "agent".into(),
            start_us: 0,
            first_token_us: Some(100_000),
            end_us,
            chunk_us: (0..tokens).map(|i| 100_000 + i * 10_000).collect(),
            max_tokens: tokens as u32,
            completion_tokens: tokens,
            prompt_tokens: Some(512),
            cached_tokens: None,
            usage_reported: true,
            finish_reason: Some("length".into()),
            error: None,
            ttft_us: None,
            max_gap_us: None,
        }
    }

    fn fleet(engine: &str, end_us: u64) -> BenchReport {
        let recs = vec![record(0, 64, end_us), record(1, 64, end_us)];
        let config = FleetConfig {
            agents: 2,
            ..Default::default()
        };
        let summary = FleetSummary::from_records(&recs, 2, end_us);
        let mut r = BenchReport::new(
            ClientConfig::new("http://x"),
            None,
            Workload::Fleet { config, summary },
            recs,
        );
        r.meta.insert("engine".into(), engine.into());
        r.meta.insert("model".into(), "m".into());
        r
    }

    #[test]
    fn markdown_rows_are_well_formed_and_ratios_pair_up() {
        let stall_recs = vec![record(0, 64, 800_000)];
        let stall = BenchReport::new(
            ClientConfig::new("http://x"),
            None,
            Workload::Stall {
                config: StallConfig::default(),
                summary: StallSummary::from_records(&stall_recs, 1, 800_000),
            },
            stall_recs,
        );
        let reports = [
            fleet("inferd", 1_000_000),
            fleet("llama.cpp", 2_000_000),
            stall,
        ];
        let t = markdown_tables(&reports, "llama.cpp");
        for table in t.split("\n\n") {
            let cols: Vec<usize> = table.lines().map(|l| l.matches('|').count()).collect();
            assert!(cols.len() >= 3, "{table}");
            assert!(cols.iter().all(|&c| c == cols[0]), "{table}");
        }
        // inferd did 128 tokens in 1 s, llama.cpp in 2 s: ratio 2.00; baseline row first.
        let rows: Vec<&str> = t.lines().filter(|l| l.starts_with("| m |")).collect();
        assert!(rows[0].contains("llama.cpp"));
        assert!(
            rows[1].contains("inferd") && rows[1].contains("| 2.00 |"),
            "{}",
            rows[1]
        );
    }
}
