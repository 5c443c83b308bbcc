//! `inferd bench`: the fleet benchmark client (drives any OpenAI-compatible server).

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use inferd_bench::plot::{throughput_svg, ttft_cdf_svg, write_svg};
use inferd_bench::{
    compare_table, markdown_tables, run_arrivals, run_fleet, run_forked, run_multi_turn,
    run_resume, run_stall, ArrivalsConfig, BenchReport, Client, ClientConfig, FleetConfig,
    ForkedConfig, MultiTurnConfig, ResumeConfig, StallConfig,
};
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    workload: Workload,
}

#[derive(clap::Subcommand)]
enum Workload {
    /// N agents released together, each with its own context, each running T turns of R-token
    /// replies; reports tok/s, TTFT per agent and inter-token gaps.
    Fleet(FleetArgs),
    /// Agents decode long replies; once all stream, one long prompt arrives. Reports their
    /// worst inter-token gap during its prefill vs their median gap before, and its TTFT.
    Stall(StallArgs),
    /// Markdown comparison tables from JSON reports (rows of one model and workload shape are
    /// compared with the baseline engine's row).
    Table(TableArgs),
    /// Agents arriving at Poisson-distributed times (seeded), one request each; reports TTFT
    /// under the load of earlier arrivals and when all are done.
    Arrivals(ArrivalsArgs),
    /// One conversation growing turn by turn; reports TTFT and the prefix-cache hit
    /// (usage.prompt_tokens_details.cached_tokens / prompt_tokens) of every turn.
    MultiTurn(MultiTurnArgs),
    /// One shared brief sent once (a timed max_tokens-1 warm-up), then N agents released
    /// together on brief + their own suffix; reports the brief's TTFT, the relaunch time (to
    /// the last agent's first token), TTFTs and each agent's cached_tokens / prompt_tokens.
    Forked(ForkedArgs),
    /// N agents send turn 0, unrelated filler traffic runs, then the agents come back with
    /// turn 1; reports TTFT on return vs turn 0 and the cached fraction on return.
    Resume(ResumeArgs),
    /// Two JSON reports side by side (tok/s, TTFT, tokens per reply, inter-token gaps,
    /// cached %, JSON valid %, errors) with B/A ratios.
    Compare(CompareArgs),
    /// SVG plots from JSON reports: a TTFT CDF, or throughput against agents.
    Plot(PlotArgs),
    /// Many clients send a seeded mix of valid and hostile requests for a bounded time;
    /// reports unexpected outcomes (a 5xx, a hang, a broken stream), the server's memory
    /// over time and the KV blocks still in use once it is idle.
    Soak(SoakArgs),
}

#[derive(clap::Args)]
struct SoakArgs {
    #[command(flatten)]
    common: Common,
    /// Concurrent clients.
    #[arg(long, short = 'n', default_value_t = 64, value_parser = super::sizes(0..=100_000))]
    clients: usize,
    /// How long, in seconds.
    #[arg(long, default_value_t = 120)]
    seconds: u64,
    /// Share of hostile requests (0..1).
    #[arg(long, default_value_t = 0.3)]
    invalid: f64,
}

#[derive(clap::Args)]
struct PlotArgs {
    #[command(subcommand)]
    kind: PlotKind,
}

#[derive(clap::Subcommand)]
enum PlotKind {
    /// One line per report: the fraction of its requests with TTFT at most x ms (fleet,
    /// arrivals, multi-turn: every agent request; forked: the agents; resume: the returns;
    /// stall: the long prompt). Log x axis when the TTFTs span more than 10x.
    TtftCdf(PlotFiles),
    /// One line per engine (or --label): combined generated tok/s against the reports' agent
    /// counts.
    Throughput(PlotFiles),
}

#[derive(clap::Args)]
struct PlotFiles {
    /// Reports written by `--out`.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The SVG file to write.
    #[arg(long, short)]
    out: PathBuf,
    /// Line labels, one per report in order (default: the report's engine and the inferd
    /// extensions it used, e.g. "inferd +sessions"; throughput joins reports of one label).
    #[arg(long)]
    label: Vec<String>,
    /// Chart title (default: the workloads and models).
    #[arg(long)]
    title: Option<String>,
}

#[derive(clap::Args)]
struct CompareArgs {
    /// The reference report (the ratios divide by it).
    a: PathBuf,
    /// The report compared with it.
    b: PathBuf,
}

#[derive(clap::Args)]
struct ArrivalsArgs {
    #[command(flatten)]
    common: Common,
    /// Agents (requests) in all.
    #[arg(long, short = 'n', default_value_t = 16, value_parser = super::sizes(0..=100_000))]
    agents: usize,
    /// Mean arrivals per second (exponential gaps, seeded by --seed).
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    rate: f64,
    /// Each agent's prompt, in tokens.
    #[arg(long, short = 'c', default_value_t = 512, value_parser = super::sizes(1..=1 << 22))]
    context: usize,
    /// Tokens per reply (max_tokens).
    #[arg(long, short = 'r', default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..=1 << 20))]
    reply: u32,
}

#[derive(clap::Args)]
struct MultiTurnArgs {
    #[command(flatten)]
    common: Common,
    /// Turns of the conversation.
    #[arg(long, short = 't', default_value_t = 8, value_parser = super::sizes(0..=10_000))]
    turns: usize,
    /// The turn-0 prompt, in tokens.
    #[arg(long, short = 'c', default_value_t = 2048, value_parser = super::sizes(1..=1 << 22))]
    context: usize,
    /// Tokens per reply (max_tokens).
    #[arg(long, short = 'r', default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..=1 << 20))]
    reply: u32,
    /// Send inferd's "inferd": {"session": ID} with every turn (fails against servers
    /// without inferd's extensions).
    #[arg(long)]
    sessions: bool,
}

#[derive(clap::Args)]
struct ForkedArgs {
    #[command(flatten)]
    common: Common,
    /// The shared brief, in tokens.
    #[arg(long, short = 'b', default_value_t = 4096, value_parser = super::sizes(0..=1 << 22))]
    brief: usize,
    /// Agents released together after the brief.
    #[arg(long, short = 'n', default_value_t = 8, value_parser = super::sizes(0..=100_000))]
    agents: usize,
    /// Each agent's own suffix after the brief, in tokens.
    #[arg(long, short = 's', default_value_t = 64, value_parser = super::sizes(0..=1 << 22))]
    suffix: usize,
    /// Tokens per agent reply (max_tokens).
    #[arg(long, short = 'r', default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..=1 << 20))]
    reply: u32,
    /// Create the brief as a pinned inferd context (POST /v1/contexts, timed on its own);
    /// agents send "inferd": {"context": ID} and only their suffix; the context is deleted at
    /// the end (fails against servers without inferd's extensions).
    #[arg(long)]
    pin_brief: bool,
}

#[derive(clap::Args)]
struct ResumeArgs {
    #[command(flatten)]
    common: Common,
    /// Agents (each sends turn 0, then returns with turn 1).
    #[arg(long, short = 'n', default_value_t = 4, value_parser = super::sizes(0..=100_000))]
    agents: usize,
    /// Each agent's (and filler request's) turn-0 prompt, in tokens.
    #[arg(long, short = 'c', default_value_t = 2048, value_parser = super::sizes(1..=1 << 22))]
    context: usize,
    /// Tokens per reply (max_tokens), the filler's included.
    #[arg(long, short = 'r', default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..=1 << 20))]
    reply: u32,
    /// Unrelated requests (distinct contexts, N at a time) between turn 0 and the return.
    #[arg(long, short = 'f', default_value_t = 16, value_parser = super::sizes(0..=1 << 22))]
    filler: usize,
    /// Each agent sends inferd's "inferd": {"session": ID} (the filler does not; fails
    /// against servers without inferd's extensions).
    #[arg(long)]
    sessions: bool,
}

#[derive(clap::Args)]
struct TableArgs {
    /// Reports written by `--out`.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Engine (meta engine=..., else label) the ratios divide by.
    #[arg(long, default_value = "llama.cpp")]
    baseline: String,
}

#[derive(clap::Args)]
struct Common {
    /// Server base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// The `model` field of requests (default: the first model of GET /v1/models, if any).
    #[arg(long)]
    model: Option<String>,
    /// Bearer token.
    #[arg(long, env = "INFERD_API_KEY")]
    api_key: Option<String>,
    /// Per-request time limit in seconds (a request past it counts as a timeout error).
    #[arg(long, default_value_t = 600.0, allow_negative_numbers = true)]
    timeout: f64,
    /// Use /v1/completions with token-id prompts (exact sizes, no calibration).
    #[arg(long)]
    token_prompts: bool,
    /// Do not send "ignore_eos": true.
    #[arg(long)]
    no_ignore_eos: bool,
    /// Sampling temperature sent with every request (0 to 2).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    temperature: f32,
    /// DRY repeat penalty sent with every request (`dry_multiplier`; 0: off, also for
    /// replies held to a schema, which inferd gives DRY by default).
    #[arg(long, allow_negative_numbers = true)]
    dry_multiplier: Option<f32>,
    /// Corpus seed (same seed, same prompts).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Wait up to this many seconds for GET /health to answer 2xx before starting (0: don't).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    wait_health: f64,
    /// Label stored in the JSON report (e.g. the engine's name).
    #[arg(long)]
    label: Option<String>,
    /// KEY=VALUE notes stored in the report (`table` uses model=... and engine=...).
    #[arg(long, value_parser = parse_meta)]
    meta: Vec<(String, String)>,
    /// Write the JSON report (config, summary, every request's timings) here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(clap::Args)]
struct FleetArgs {
    #[command(flatten)]
    common: Common,
    /// Agents released together.
    #[arg(long, short = 'n', default_value_t = 4, value_parser = super::sizes(0..=100_000))]
    agents: usize,
    /// Each agent's turn-0 prompt, in the server's tokens.
    #[arg(long, short = 'c', default_value_t = 512, value_parser = super::sizes(1..=1 << 22))]
    context: usize,
    /// Turns per agent (turn k+1 appends the reply and a short user message).
    #[arg(long, short = 't', default_value_t = 1, value_parser = super::sizes(0..=10_000))]
    turns: usize,
    /// Tokens per reply (max_tokens).
    #[arg(long, short = 'r', default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..=1 << 20))]
    reply: u32,
    /// Each agent sends inferd's "inferd": {"session": ID} with its requests (fails against
    /// servers without inferd's extensions).
    #[arg(long)]
    sessions: bool,
    /// Agents answer as JSON held to this JSON Schema: a file, or `builtin` (an agent action:
    /// thought, one of four tools, typed args, confidence). The turn-0 user message ends with
    /// "Answer as JSON matching this JSON Schema: SCHEMA" (later user messages with a one-line
    /// reminder) and every request carries "response_format": {"type": "json_schema",
    /// "json_schema": {"name": "agent_reply", "strict": true, "schema": SCHEMA}}. Chat prompts
    /// only; the prompt text comes on top of --context.
    #[arg(
        long,
        value_name = "FILE|builtin",
        conflicts_with = "json_schema_prompt_only"
    )]
    json_schema: Option<String>,
    /// The prompt text of --json-schema without response_format: the unconstrained twin of a
    /// --json-schema run (same seed and schema: identical prompts, only the constraint
    /// differs).
    #[arg(long, value_name = "FILE|builtin")]
    json_schema_prompt_only: Option<String>,
}

#[derive(clap::Args)]
struct StallArgs {
    #[command(flatten)]
    common: Common,
    /// Decoding agents (0: none, with --short).
    #[arg(long, short = 'n', default_value_t = 8, value_parser = super::sizes(0..=100_000))]
    agents: usize,
    /// Each decoding agent's prompt, in tokens.
    #[arg(long, short = 'c', default_value_t = 128, value_parser = super::sizes(1..=1 << 22))]
    context: usize,
    /// Short requests sent after the long prompt (their TTFT: do they wait for its prefill?).
    #[arg(long, default_value_t = 0, value_parser = super::sizes(0..=100_000))]
    short: usize,
    /// The short requests' prompt, in tokens.
    #[arg(long, default_value_t = 16, value_parser = super::sizes(0..=1 << 22))]
    short_prompt: usize,
    /// Milliseconds after the long prompt the short requests are sent.
    #[arg(long, default_value_t = 3000)]
    short_after_ms: u64,
    /// Decoding agents' reply length (long enough to outlast the long prompt's prefill).
    #[arg(long, short = 'r', default_value_t = 256, value_parser = clap::value_parser!(u32).range(0..=1 << 20))]
    reply: u32,
    /// The long prompt, in tokens.
    #[arg(long, default_value_t = 2048, value_parser = super::sizes(1..=1 << 22))]
    long_prompt: usize,
    /// The long prompt's max_tokens.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    long_reply: u32,
    /// Chunks every agent must have received before the long prompt is sent.
    #[arg(long, default_value_t = 16)]
    warmup: u64,
}

pub fn run(a: Args) -> Result<()> {
    inferd_bench::block_on(async {
        match a.workload {
            Workload::Fleet(f) => {
                let prompt_only = f.json_schema_prompt_only.is_some();
                let structured = f.json_schema.or(f.json_schema_prompt_only);
                let schema = structured
                    .as_deref()
                    .map(inferd_bench::structured::load_schema)
                    .transpose()?;
                let cfg = FleetConfig {
                    agents: f.agents,
                    context_tokens: f.context,
                    turns: f.turns,
                    reply_tokens: f.reply,
                    token_prompts: f.common.token_prompts,
                    seed: f.common.seed,
                    sessions: f.sessions,
                    structured,
                    prompt_only,
                    schema,
                };
                let (client, pb) = connect(&f.common).await?;
                let report = run_fleet(&client, &cfg, &pb).await;
                finish(&f.common, pb, report)
            }
            Workload::Stall(s) => {
                let cfg = StallConfig {
                    agents: s.agents,
                    context_tokens: s.context,
                    reply_tokens: s.reply,
                    long_prompt_tokens: s.long_prompt,
                    long_reply_tokens: s.long_reply,
                    warmup_chunks: s.warmup,
                    token_prompts: s.common.token_prompts,
                    seed: s.common.seed,
                    short_arrivals: s.short,
                    short_prompt_tokens: s.short_prompt,
                    short_reply_tokens: 16,
                    short_after_ms: s.short_after_ms,
                };
                let (client, pb) = connect(&s.common).await?;
                let report = run_stall(&client, &cfg, &pb).await;
                finish(&s.common, pb, report)
            }
            Workload::Soak(x) => {
                let cfg = inferd_bench::SoakConfig {
                    clients: x.clients,
                    duration_s: x.seconds,
                    invalid_share: x.invalid,
                    sample_every_s: 5.0,
                    seed: x.common.seed,
                };
                let (client, pb) = connect(&x.common).await?;
                pb.finish_and_clear();
                let report = inferd_bench::run_soak(&client, &cfg).await?;
                print!("{}", report.table());
                if let Some(out) = &x.common.out {
                    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
                    println!("  report written to {}", out.display());
                }
                if report.errors > 0 {
                    bail!("{} requests had unexpected outcomes", report.errors);
                }
                Ok(())
            }
            Workload::Arrivals(x) => {
                let cfg = ArrivalsConfig {
                    agents: x.agents,
                    rate_per_s: x.rate,
                    context_tokens: x.context,
                    reply_tokens: x.reply,
                    token_prompts: x.common.token_prompts,
                    seed: x.common.seed,
                };
                cfg.validate()?;
                let (client, pb) = connect(&x.common).await?;
                let report = run_arrivals(&client, &cfg, &pb).await;
                finish(&x.common, pb, report)
            }
            Workload::MultiTurn(m) => {
                let cfg = MultiTurnConfig {
                    turns: m.turns,
                    context_tokens: m.context,
                    reply_tokens: m.reply,
                    token_prompts: m.common.token_prompts,
                    seed: m.common.seed,
                    sessions: m.sessions,
                };
                let (client, pb) = connect(&m.common).await?;
                let report = run_multi_turn(&client, &cfg, &pb).await;
                finish(&m.common, pb, report)
            }
            Workload::Forked(f) => {
                let cfg = ForkedConfig {
                    agents: f.agents,
                    brief_tokens: f.brief,
                    suffix_tokens: f.suffix,
                    reply_tokens: f.reply,
                    token_prompts: f.common.token_prompts,
                    seed: f.common.seed,
                    pin_brief: f.pin_brief,
                };
                let (client, pb) = connect(&f.common).await?;
                let report = run_forked(&client, &cfg, &pb).await;
                finish(&f.common, pb, report)
            }
            Workload::Resume(r) => {
                let cfg = ResumeConfig {
                    agents: r.agents,
                    context_tokens: r.context,
                    reply_tokens: r.reply,
                    filler_requests: r.filler,
                    token_prompts: r.common.token_prompts,
                    seed: r.common.seed,
                    sessions: r.sessions,
                };
                let (client, pb) = connect(&r.common).await?;
                let report = run_resume(&client, &cfg, &pb).await;
                finish(&r.common, pb, report)
            }
            Workload::Table(t) => {
                let reports = t
                    .files
                    .iter()
                    .map(|f| read_report(f))
                    .collect::<Result<Vec<_>>>()?;
                print!("{}", markdown_tables(&reports, &t.baseline));
                Ok(())
            }
            Workload::Compare(c) => {
                print!(
                    "{}",
                    compare_table(&read_report(&c.a)?, &read_report(&c.b)?)
                );
                Ok(())
            }
            Workload::Plot(p) => plot(p.kind),
        }
    })?
}

async fn connect(c: &Common) -> Result<(Client, ProgressBar)> {
    if !(c.timeout > 0.0 && c.timeout <= 1e6) {
        bail!("--timeout must be a number of seconds in (0, 1000000]");
    }
    if !(c.wait_health >= 0.0 && c.wait_health <= 1e6) {
        bail!("--wait-health must be a number of seconds in [0, 1000000]");
    }
    // (NaN fails these too: sent as JSON it would be null, the server's default.)
    if !(0.0..=2.0).contains(&c.temperature) {
        bail!("--temperature must be in [0, 2]");
    }
    if c.dry_multiplier
        .is_some_and(|m| !(m >= 0.0 && m.is_finite()))
    {
        bail!("--dry-multiplier must be a finite number, 0 or more");
    }
    // The report is written at the end: a folder that is not there fails now, not after
    // the run.
    if let Some(out) = &c.out {
        let dir = out.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) {
            bail!("--out {}: its folder does not exist", out.display());
        }
    }
    let mut cfg = ClientConfig::new(&c.url);
    cfg.model = c.model.clone();
    cfg.api_key = c.api_key.clone();
    cfg.timeout = Duration::from_secs_f64(c.timeout);
    cfg.ignore_eos = !c.no_ignore_eos;
    cfg.temperature = Some(c.temperature);
    cfg.dry_multiplier = c.dry_multiplier;
    let mut client = Client::new(cfg)?;
    if c.wait_health > 0.0
        && !client
            .wait_healthy(Duration::from_secs_f64(c.wait_health))
            .await
    {
        bail!(
            "{}/health did not answer within {} s",
            client.base_url(),
            c.wait_health
        );
    }
    client.resolve_model().await?;
    let pb = if c.quiet {
        ProgressBar::hidden()
    } else {
        let pb = ProgressBar::new(0);
        pb.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} requests  {msg}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        pb.enable_steady_tick(Duration::from_millis(200));
        pb
    };
    Ok((client, pb))
}

fn finish(c: &Common, pb: ProgressBar, report: Result<BenchReport>) -> Result<()> {
    pb.finish_and_clear();
    let mut report = report?;
    report.label = c.label.clone();
    report.meta = c.meta.iter().cloned().collect();
    print!("{}", report.table());
    if let Some(out) = &c.out {
        report.write(out)?;
        println!("  report written to {}", out.display());
    }
    let e = report.errors().total;
    if e > 0 {
        bail!("{e} of {} requests failed", report.requests.len());
    }
    Ok(())
}

/// A plot: reports, labels, title -> SVG.
type Draw = fn(&[BenchReport], &[String], Option<&str>) -> Result<String>;

fn plot(kind: PlotKind) -> Result<()> {
    let (p, draw): (PlotFiles, Draw) = match kind {
        PlotKind::TtftCdf(p) => (p, ttft_cdf_svg),
        PlotKind::Throughput(p) => (p, throughput_svg),
    };
    let reports = p
        .files
        .iter()
        .map(|f| read_report(f))
        .collect::<Result<Vec<_>>>()?;
    let svg = draw(&reports, &p.label, p.title.as_deref())?;
    write_svg(&p.out, &svg)?;
    println!("{}", p.out.display());
    Ok(())
}

fn read_report(f: &Path) -> Result<BenchReport> {
    let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
    BenchReport::from_json(&text).with_context(|| format!("parsing {}", f.display()))
}

fn parse_meta(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}
