//! `inferd serve`: the OpenAI-compatible server in the foreground.
//!
//! Loads the model (pulling the default one on first use), starts the engine (with a
//! warm-up pass), binds, and serves until SIGINT/SIGTERM; then it stops accepting
//! connections and requests, lets running requests finish, and exits.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use inferd_engine::{parse_kv_budget, EngineConfig, EngineHandle};
use inferd_runtime::{Backend, KvDtype};
use inferd_server::{check_bind, AppState, ServerConfig};
use inferd_text::ChatTemplate;

use crate::device::Device;
use crate::loaded::Loaded;
use crate::pull::DEFAULT_MODEL;

#[derive(clap::Args)]
pub struct Args {
    /// Built-in model name or a path (.gguf file, or a directory with config.json + safetensors).
    #[arg(long, short, default_value = DEFAULT_MODEL)]
    model: String,
    /// Address to listen on. Anything but loopback needs --api-key.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Require `Authorization: Bearer KEY` on /v1 routes.
    #[arg(long, env = "INFERD_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Where the model runs: cpu, cuda, cuda:N, or auto (the first GPU when this binary
    /// has CUDA and the machine a GPU, else the CPU).
    #[arg(long, default_value = "auto")]
    device: String,
    /// On the CPU, keep activations in f32 in every matrix product, generated rows too
    /// (they are rounded to 8 bits by default, as llama.cpp does): a reply then does not
    /// depend on whether its prompt's KV came from the cache or was recomputed, at about a
    /// seventh of the decode speed (README, "Reproducibility").
    #[arg(long)]
    f32_activations: bool,
    /// On a GPU, run decode steps eagerly instead of replaying CUDA graphs (for comparison).
    #[arg(long)]
    no_graphs: bool,
    /// On a GPU, the kernel of decode rows' attention (for comparison): auto (inferd's
    /// tensor-core build where it takes the shape, else its SIMT build for passes of up to
    /// 2 rows and FlashInfer's above), inferd (the SIMT build at every row count),
    /// flashinfer, or tensor-cores (the tensor-core build wherever it takes the shape).
    #[arg(long, default_value = "auto", value_parser = ["auto", "inferd", "flashinfer", "tensor-cores"])]
    decode_attention: String,
    /// GPU only: which K/V layout prompt chunks' attention reads: auto (a contiguous copy
    /// where the chunk is long enough for the copy to pay, else the pool's pages), paged,
    /// or contiguous.
    #[arg(long, default_value = "auto", value_parser = ["auto", "paged", "contiguous"])]
    prefill_kv: String,
    /// GPU only: which prompt chunks FlashInfer's FA2 prefill takes, which splits a long
    /// context's keys over the GPU: off (the SM90 prefill for every chunk), auto (the
    /// default; chunks of up to 64 tokens at the 8B shape with at least 1024 keys before
    /// them, which the SM90 prefill runs on few SMs; head_dim 64, 128 and 256), or always
    /// (every chunk; for measurement).
    #[arg(long, default_value = "auto", value_parser = ["off", "auto", "always"])]
    prefill_split: String,
    /// KV cache memory: a size (512M, 2G) or a share of free memory (25%; on a GPU, of
    /// the device memory left after the weights). Default: 25% on the CPU, 85% on a GPU.
    #[arg(long)]
    kv_memory: Option<String>,
    /// Longest sequence (prompt + generated) in tokens; default: the model's context.
    #[arg(long)]
    max_context: Option<usize>,
    /// Requests waiting for admission before new ones get 429.
    #[arg(long, value_parser = super::sizes(1..=1_000_000))]
    max_queue: Option<usize>,
    /// Seconds a request may wait for admission before it gets a 503 (0: no limit).
    #[arg(long, default_value_t = inferd_engine::DEFAULT_QUEUE_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(0..=604_800))]
    queue_timeout: u64,
    /// Tokens per forward pass (decodes and prefill chunks together; default 512, 8192 on a GPU).
    #[arg(long, value_parser = super::sizes(1..=1 << 20))]
    max_batch_tokens: Option<usize>,
    /// Prefill tokens per forward pass when nothing is decoding (default 256; 8192 on a GPU).
    #[arg(long, value_parser = super::sizes(1..=1 << 20))]
    max_prefill_tokens: Option<usize>,
    /// Prefill tokens per forward pass while other requests decode (default 128; 4096 on a
    /// GPU): a long prompt is read in slices this size between their tokens.
    #[arg(long, value_parser = super::sizes(1..=1 << 20))]
    max_prefill_tokens_decoding: Option<usize>,
    /// Whether decode rows count against --max-prefill-tokens-decoding, so a pass with a
    /// full prompt slice has exactly that many rows (default false: on an H100 it made 64 x
    /// 4k and 32 x 16k finish 1% later, their prompts split across more passes; session 32).
    #[arg(long)]
    decodes_in_prefill_slice: Option<bool>,
    /// Sequences generating at once.
    #[arg(long, value_parser = super::sizes(1..=4096))]
    max_running: Option<usize>,
    /// Waiting requests considered for admission each forward pass (default 8 on the CPU,
    /// 64 on a GPU). Agents arriving together with short new prompts are admitted this
    /// many a pass.
    #[arg(long, value_parser = super::sizes(1..=4096))]
    lookahead: Option<usize>,
    /// Tokens per KV block.
    #[arg(long, value_parser = super::sizes(1..=1024))]
    block_size: Option<usize>,
    /// Largest request body, e.g. 4M (default 4 MiB).
    #[arg(long)]
    max_body: Option<String>,
    /// Connections open at once (default 1024, or half the descriptor limit if lower);
    /// past it new connections wait in the backlog.
    #[arg(long, value_parser = super::sizes(1..=65_536))]
    max_connections: Option<usize>,
    /// Seconds a client has to send a request's headers, also between requests on a
    /// kept-alive connection (idle connections are closed after it).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    header_timeout: u64,
    /// Seconds a request body has to arrive whole (408 past it).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    body_timeout: u64,
    /// Seconds a client may read nothing of its reply before its connection is closed
    /// and its request cancelled.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    write_timeout: u64,
    /// Largest max_tokens a request may get (larger asks are clamped).
    #[arg(long, value_parser = super::sizes(1..=1 << 24))]
    max_tokens_cap: Option<usize>,
    /// Skip the warm-up pass at start.
    #[arg(long)]
    no_warmup: bool,
    /// Name clients use in `model` (default: the model name or file stem); repeat for aliases.
    #[arg(long)]
    served_model_name: Vec<String>,
    /// KV cache element type. 8-bit, with one scale per token and head: q8 (int8) or fp8
    /// (e4m3); a quarter of f32's memory, half of bf16's, so that many more agents at a
    /// fixed --kv-memory; q8 is the more accurate of the two. Also f32 (the CPU's
    /// default) and bf16 (the GPU's default; GPU only).
    #[arg(long, value_parser = ["f32", "bf16", "q8", "int8", "fp8"])]
    kv_dtype: Option<String>,
    /// Share of the KV pool parked sessions may hold (0..1, default 0.5); past it, or when
    /// requests wait for memory, the least recently used session is released (to the
    /// SSD tier when --spill-dir is set).
    #[arg(long)]
    park_fraction: Option<f64>,
    /// Hybrid models: share of --kv-memory for recurrent-state slots (running sequences
    /// and snapshots), 0..1, default 0.5.
    #[arg(long)]
    state_fraction: Option<f64>,
    /// Queue each step before the one ahead of it has come back, so the host's work on a
    /// step overlaps the device's on the one before: auto (on for a GPU), on, off.
    #[arg(long, value_parser = ["auto", "on", "off"])]
    step_overlap: Option<String>,
    /// While a pass runs, how long (ms, at most 100) the next step waits for generation
    /// requests whose bodies are read but not yet tokenized, so agents arriving together
    /// join one pass; 0: no wait. Default 3.
    #[arg(long)]
    arrival_wait_ms: Option<u64>,
    /// Threads computing a step's grammar masks (JSON Schema, tool calls): default one on
    /// the CPU, half the cores up to 8 on a GPU.
    #[arg(long, value_parser = super::sizes(1..=256))]
    mask_threads: Option<usize>,
    /// Speculative decoding with copy drafts: a decode also checks the tokens that
    /// followed the latest earlier occurrence of its last few tokens (in its prompt or
    /// reply), in the same pass, and keeps those the model draws too. The reply is
    /// plain decoding's, token for token on the CPU (on a GPU up to bf16 rounding: a draft
    /// row runs the prefill kernels); replies that copy (code edits, quotes, lists) take
    /// fewer steps (also under a JSON Schema or a forced tool call: a draft is cut to what
    /// the grammar allows). Not for hybrid models.
    /// A step that drafts does not overlap the one before. auto: on for the CPU, off on a
    /// GPU (not measured there yet).
    #[arg(long, value_parser = ["auto", "on", "off"], default_value = "auto")]
    speculate: String,
    /// Draft tokens a decode checks at most (1 to 32, default 4).
    #[arg(long)]
    draft_tokens: Option<usize>,
    /// Draft tokens a step checks at most, all decodes together (default 16 decodes'
    /// worth).
    #[arg(long)]
    draft_budget: Option<usize>,
    /// No drafts in a step where more requests than this decode (default 1 on the CPU,
    /// whose passes past a row or two are bound by arithmetic, so drafts cost about what
    /// they save: docs/RESULTS.md; 16 on a GPU).
    #[arg(long)]
    draft_max_decodes: Option<usize>,
    /// Drafts from a small model instead of copies (a built-in name or a path): it
    /// guesses each decoding request's next tokens greedily, and the model keeps those
    /// it draws too, so replies are unchanged. It must share the model's tokenizer (as
    /// qwen2.5-coder-0.5b-instruct does qwen2.5-coder-1.5b-instruct's) and be dense. Its
    /// KV takes a share of the KV budget (as many tokens as the model's). Turns
    /// speculative decoding on (auto), also on a GPU.
    #[arg(long, value_name = "NAME|PATH")]
    draft_model: Option<String>,
    /// Hybrid models: a recurrent-state snapshot every this many tokens (default 512),
    /// besides those at the end of every context and session turn.
    #[arg(long)]
    snapshot_interval: Option<usize>,
    /// Directory of the SSD tier: contexts and sessions are written through to it and
    /// survive memory pressure and restarts (checksummed, atomic files).
    #[arg(long)]
    spill_dir: Option<std::path::PathBuf>,
    /// Size budget of the SSD tier, e.g. 20G (least recently used blocks evicted past it,
    /// never a pinned context's: size it above the pinned contexts).
    #[arg(long, default_value = "8G")]
    spill_budget: String,
    /// Size budget of stored responses (Responses API), e.g. 256M (least recently used
    /// expire past it). With --spill-dir they are kept in its `responses/` folder.
    #[arg(long, default_value = "256M")]
    responses_budget: String,
    /// Never start a request from cached KV (to measure what the prefix cache saves).
    #[arg(long)]
    no_prefix_cache: bool,
    /// How the model writes tool calls (default: detected from its chat template).
    #[arg(long, value_parser = ["hermes", "qwen", "llama3_json", "llama3"])]
    tool_syntax: Option<String>,
}

/// `2G`, `512k`, `1000` -> bytes.
fn parse_size(s: &str) -> Result<usize> {
    match parse_kv_budget(s).map_err(|e| anyhow!(e))? {
        inferd_engine::KvBudget::Bytes(b) => Ok(b as usize),
        inferd_engine::KvBudget::FractionOfFree(_) => bail!("`{s}`: give a size, not a percentage"),
    }
}

/// The name clients use: the built-in name, or a file's stem.
fn default_name(model: &str) -> String {
    let p = std::path::Path::new(model);
    if p.exists() {
        let stem = if p.is_dir() {
            p.file_name()
        } else {
            p.file_stem()
        };
        if let Some(s) = stem.and_then(|s| s.to_str()) {
            return s.to_string();
        }
    }
    model.to_string()
}

/// Prompt tokens a GPU step takes at most, by default (half that while others decode).
const GPU_BATCH_TOKENS: usize = 8192;

/// The scheduler's admission window a pass on a GPU (`--lookahead`; the CPU keeps 8).
const GPU_LOOKAHEAD: usize = 64;

pub fn run(a: Args) -> Result<()> {
    // Removes this server's state files however `run` ends.
    let _state_files = StateFiles::take();
    // A blank key (`--api-key " "`) is no key; around a key, whitespace (a CRLF `.env`
    // file's `\r`) is not part of it, as clients' keys are read trimmed.
    let api_key = a
        .api_key
        .as_deref()
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_string);
    if let Some(k) = &api_key {
        if !k.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
            bail!(
                "--api-key (or INFERD_API_KEY) holds control or non-ASCII characters, which \
                 clients cannot send in an HTTP header as they are: use visible ASCII"
            );
        }
    }
    check_bind(a.host, api_key.as_deref()).map_err(|e| anyhow!(e))?;
    let addr = SocketAddr::new(a.host, a.port);
    let device = crate::device::resolve(&a.device)?;
    let on_gpu = device != Device::Cpu;
    let kv_memory = a
        .kv_memory
        .clone()
        .unwrap_or_else(|| if on_gpu { "85%" } else { "25%" }.into());
    let mut engine_cfg = EngineConfig {
        kv_budget: parse_kv_budget(&kv_memory)
            .map_err(|e| anyhow!(e))
            .context("--kv-memory")?,
        max_context: a.max_context,
        warmup: !a.no_warmup,
        ..Default::default()
    };
    if let Some(v) = a.max_queue {
        engine_cfg.max_queue = v;
    }
    engine_cfg.queue_timeout =
        (a.queue_timeout > 0).then(|| std::time::Duration::from_secs(a.queue_timeout));
    engine_cfg.prefix_cache = !a.no_prefix_cache;
    engine_cfg.kv_dtype = match (a.kv_dtype.as_deref(), on_gpu) {
        (None, false) => KvDtype::F32,
        (None, true) => KvDtype::Bf16,
        (Some(name), _) => KvDtype::from_name(name)
            .ok_or_else(|| anyhow!("--kv-dtype: unknown element type {name:?}"))?,
    };
    if let Some(f) = a.park_fraction {
        if !(0.0..=1.0).contains(&f) {
            bail!("--park-fraction must be in [0, 1], got {f}");
        }
        engine_cfg.park_fraction = f;
    }
    if let Some(f) = a.state_fraction {
        if !(f > 0.0 && f < 1.0) {
            bail!("--state-fraction must be in (0, 1), got {f}");
        }
        engine_cfg.state_fraction = f;
    }
    match a.step_overlap.as_deref() {
        Some("on") => engine_cfg.step_overlap = Some(true),
        Some("off") => engine_cfg.step_overlap = Some(false),
        Some(_) => engine_cfg.step_overlap = None,
        None => {}
    }
    if let Some(ms) = a.arrival_wait_ms {
        if ms > 100 {
            bail!("--arrival-wait-ms must be at most 100, got {ms}");
        }
        engine_cfg.arrival_wait = std::time::Duration::from_millis(ms);
    }
    if let Some(n) = a.mask_threads {
        engine_cfg.mask_threads = Some(n);
    }
    let spill_budget = parse_size(&a.spill_budget).context("--spill-budget")? as u64;
    if let Some(dir) = &a.spill_dir {
        engine_cfg.spill = Some(inferd_engine::SpillConfig {
            dir: dir.clone(),
            budget_bytes: spill_budget,
            read_delay: std::time::Duration::ZERO,
            write_delay: std::time::Duration::ZERO,
        });
    }
    if let Some(v) = a.block_size {
        engine_cfg.block_size = v;
    }
    if on_gpu {
        // A GPU step reads every weight whatever its size, so small slices waste it: up to
        // 8192 prompt tokens a step, 4096 while others decode (about 110 ms a step on the
        // H200 for an 8B model, the longest pause a decoding request sees). Against 4096 /
        // 2048, 64 agents x 4k finished in 9.70 s instead of 10.10 (last first token 7.57 s
        // instead of 8.35) and 32 x 16k had their first tokens by 19.9 s instead of 20.8,
        // for a worst gap of 250-380 ms instead of 150-200 (session 7, docs/gpu-notes.md).
        // Late slices of a long prompt are not shortened: there attention runs near the
        // tensor cores' peak, and shortening them made 32 prompts of 16k take 54 s instead
        // of ~20. (The sizes the H200 fleet figures in docs/RESULTS.md were measured with.)
        engine_cfg.sched.max_batch_tokens = GPU_BATCH_TOKENS;
        engine_cfg.sched.max_prefill_tokens = GPU_BATCH_TOKENS;
        engine_cfg.sched.max_prefill_tokens_decoding = GPU_BATCH_TOKENS / 2;
        engine_cfg.sched.max_prefill_area_decoding = usize::MAX;
        // One GPU pass takes a crowd's short prompts as cheaply as a few: 32 agents
        // relaunched on an 8k brief got their last first token 242.5 -> 183.8 ms (H100,
        // `scripts/gpu/run.sh lookahead`, session 28), the 8 x 4k fleet unchanged.
        engine_cfg.sched.lookahead = GPU_LOOKAHEAD;
    }
    if let Some(v) = a.max_batch_tokens {
        engine_cfg.sched.max_batch_tokens = v;
    }
    if let Some(v) = a.max_prefill_tokens {
        engine_cfg.sched.max_prefill_tokens = v;
    }
    if let Some(v) = a.max_prefill_tokens_decoding {
        engine_cfg.sched.max_prefill_tokens_decoding = v;
    }
    if let Some(v) = a.decodes_in_prefill_slice {
        engine_cfg.sched.decodes_in_prefill_slice = v;
    }
    if let Some(v) = a.max_running {
        engine_cfg.sched.max_running = v;
    }
    if let Some(v) = a.lookahead {
        engine_cfg.sched.lookahead = v;
    }
    let speculate =
        a.speculate == "on" || (a.speculate == "auto" && (!on_gpu || a.draft_model.is_some()));
    if !speculate && a.draft_model.is_some() {
        bail!("--draft-model needs speculative decoding (--speculate on or auto)");
    }
    if !speculate && (a.draft_tokens, a.draft_budget, a.draft_max_decodes) != (None, None, None) {
        bail!(
            "--draft-tokens, --draft-budget and --draft-max-decodes need speculative decoding \
             (--speculate on; auto is off on a GPU)"
        );
    }
    if a.draft_budget == Some(0) {
        bail!("--draft-budget must be at least 1 (--speculate off turns drafts off)");
    }
    engine_cfg.speculate = None;
    if speculate {
        let spec = inferd_core::spec::SpecConfig {
            max_draft: a
                .draft_tokens
                .unwrap_or(inferd_core::spec::SpecConfig::default().max_draft),
            ..Default::default()
        };
        spec.check().map_err(|e| anyhow!("--draft-tokens: {e}"))?;
        engine_cfg.speculate = Some(spec);
        engine_cfg.sched.draft_budget = a.draft_budget.unwrap_or(0);
        engine_cfg.sched.draft_max_decodes =
            a.draft_max_decodes.unwrap_or(if on_gpu { 16 } else { 1 });
        // A GPU reads new context into the draft's KV in bigger passes.
        engine_cfg.draft_catchup = if on_gpu { 4096 } else { 512 };
    }
    if let Some(v) = a.snapshot_interval {
        if v == 0 {
            bail!("--snapshot-interval must be at least 1");
        }
        engine_cfg.sched.snapshot_interval = v;
    }
    let responses = inferd_server::responses::store::ResponsesConfig {
        dir: a.spill_dir.as_ref().map(|d| d.join("responses")),
        budget_bytes: parse_size(&a.responses_budget).context("--responses-budget")? as u64,
    };
    let max_body = match &a.max_body {
        Some(s) => parse_size(s).context("--max-body")?,
        None => inferd_server::DEFAULT_MAX_BODY_BYTES,
    };
    if !(1 << 10..=1 << 30).contains(&max_body) {
        bail!("--max-body must be between 1K and 1G, got {max_body} bytes");
    }
    if a.served_model_name.iter().any(|n| n.trim().is_empty()) {
        bail!("--served-model-name must not be blank");
    }
    let mut names = a.served_model_name.clone();
    let name = if names.is_empty() {
        default_name(&a.model)
    } else {
        names.remove(0)
    };

    // Metrics recorded during warm-up and later need the recorder first.
    inferd_server::metrics::install();
    let opts = BackendOptions {
        f32_activations: a.f32_activations,
        no_graphs: a.no_graphs,
        decode_attention: a.decode_attention.clone(),
        prefill_kv: a.prefill_kv.clone(),
        prefill_split: a.prefill_split.clone(),
    };
    let (engine, template) = start_engine(
        device,
        &opts,
        &a.model,
        a.draft_model.as_deref(),
        &name,
        engine_cfg,
    )?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("inferd-http")
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        let bound = listener.local_addr()?;
        let cfg = ServerConfig {
            api_key,
            max_body_bytes: max_body,
            max_tokens_cap: a.max_tokens_cap,
            aliases: names,
            address: Some(bound),
            tool_syntax: a
                .tool_syntax
                .as_deref()
                .and_then(inferd_tools::ToolSyntax::from_name),
            conn: inferd_server::listen::ConnLimits {
                max_connections: a
                    .max_connections
                    .unwrap_or_else(inferd_server::listen::default_max_connections),
                header_timeout: std::time::Duration::from_secs(a.header_timeout),
                body_timeout: std::time::Duration::from_secs(a.body_timeout),
                write_timeout: std::time::Duration::from_secs(a.write_timeout),
            },
            responses,
            ..Default::default()
        };
        let state = AppState::new(engine.clone(), template, cfg);
        write_state_file(bound, &name, false)?;
        println!("inferd listening on http://{bound} (model {name})");
        // A lost device (a fatal GPU error) stops the engine, which failed every request
        // it held: the server stops too, and exits with an error for a supervisor to start
        // a new process (nothing more can run on the device in this one).
        let watched = engine.clone();
        let shutdown = async move {
            tokio::select! {
                _ = inferd_server::shutdown_signal() => {
                    eprintln!("inferd: stopping: finishing running requests (signal again to exit now)");
                }
                why = watched.failed() => {
                    eprintln!("inferd: stopping: the device failed ({why})");
                }
            }
            // The listener closes now: `inferd status` learns why from the file.
            if let Err(e) = write_state_file(bound, &name, true) {
                eprintln!("inferd: {e:#}");
            }
            tokio::spawn(async {
                inferd_server::shutdown_signal().await;
                eprintln!("inferd: exiting without waiting");
                remove_state_files();
                std::process::exit(130);
            });
        };
        inferd_server::serve(listener, state, shutdown)
            .await
            .context("serving")?;
        anyhow::Ok(())
    });
    engine.shutdown();
    result?;
    if let Some(why) = engine.failure() {
        bail!("the device failed ({why}); start the server again");
    }
    eprintln!("inferd: stopped");
    Ok(())
}

/// The backends' settings `serve` takes (each ignores the other's).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
struct BackendOptions {
    f32_activations: bool,
    no_graphs: bool,
    decode_attention: String,
    prefill_kv: String,
    prefill_split: String,
}

/// Loads the model on `device` and starts the engine (the one place the backend type is
/// chosen: above it everything is backend-neutral).
fn start_engine(
    device: Device,
    opts: &BackendOptions,
    model: &str,
    draft: Option<&str>,
    name: &str,
    cfg: EngineConfig,
) -> Result<(EngineHandle, Option<Arc<ChatTemplate>>)> {
    /// `draft_backend` makes the draft model's backend, when there is one.
    fn go<B: Backend + 'static>(
        backend: B,
        draft_backend: impl FnOnce() -> Result<B>,
        model: &str,
        draft: Option<&str>,
        name: &str,
        cfg: EngineConfig,
    ) -> Result<(EngineHandle, Option<Arc<ChatTemplate>>)> {
        let m = Loaded::open_on(backend, model)?;
        let tokenizer = Arc::new(m.tokenizer);
        let template = m.template.map(Arc::new);
        let draft = match draft {
            Some(d) => {
                let dm = Loaded::open_on(draft_backend()?, d).context("the draft model")?;
                eprintln!("drafting with {d}");
                Some((dm.model, Arc::new(dm.tokenizer)))
            }
            None => None,
        };
        eprintln!(
            "starting the engine for {name} on {}...",
            m.model.backend.name()
        );
        let engine =
            inferd_engine::start_with_draft(m.model, draft, tokenizer, name.to_string(), cfg)
                .context("starting the engine")?;
        Ok((engine, template))
    }
    match device {
        Device::Cpu => {
            let mut c = inferd_runtime::CpuConfig::from_env();
            c.f32_activations |= opts.f32_activations;
            let cpu = inferd_runtime::CpuBackend::with_config(c);
            let draft_backend = cpu.sibling();
            go(cpu, move || Ok(draft_backend), model, draft, name, cfg)
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => {
            use inferd_runtime::DecodeAttention;
            let decode = match opts.decode_attention.as_str() {
                "auto" => DecodeAttention::Auto,
                "inferd" => DecodeAttention::Inferd,
                "flashinfer" => DecodeAttention::FlashInfer,
                "tensor-cores" => DecodeAttention::TensorCores,
                other => bail!(
                    "--decode-attention {other}: expected auto, inferd, flashinfer or tensor-cores"
                ),
            };
            use inferd_runtime::PrefillKv;
            let prefill_kv = match opts.prefill_kv.as_str() {
                "auto" => PrefillKv::Auto,
                "paged" => PrefillKv::Paged,
                "contiguous" => PrefillKv::Contiguous,
                other => bail!("--prefill-kv {other}: expected auto, paged or contiguous"),
            };
            use inferd_runtime::SplitPrefill;
            let split_prefill = match opts.prefill_split.as_str() {
                "off" => SplitPrefill::Off,
                "auto" => SplitPrefill::Auto,
                "always" => SplitPrefill::Always,
                other => bail!("--prefill-split {other}: expected off, auto or always"),
            };
            let config = inferd_runtime::CudaConfig {
                device: n,
                no_graphs: opts.no_graphs,
                decode,
                prefill_kv,
                split_prefill,
                lose_device_after: inferd_runtime::lose_device_after_from_env(),
                ..Default::default()
            };
            let b = inferd_runtime::CudaBackend::new(config)?;
            eprintln!(
                "GPU {n}: {} ({:.0} GiB)",
                b.info().name,
                b.info().total_bytes as f64 / (1u64 << 30) as f64
            );
            // The draft model's backend: the same device, no contiguous-prompt scratch (its
            // prompts read pages) and no test fault.
            let draft_backend = || {
                Ok(inferd_runtime::CudaBackend::new(
                    inferd_runtime::CudaConfig {
                        prefill_kv: PrefillKv::Paged,
                        lose_device_after: None,
                        ..config
                    },
                )?)
            };
            go(b, draft_backend, model, draft, name, cfg)
        }
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => unreachable!("resolve refuses cuda without the feature"),
    }
}

/// `INFERD_STATE_FILE`: where `inferd start` expects `{"pid", "addr", "model"}`.
/// `stopping`: the server has closed its listener and is finishing running requests.
fn write_state_file(addr: SocketAddr, model: &str, stopping: bool) -> Result<()> {
    let Some(path) = std::env::var_os("INFERD_STATE_FILE") else {
        return Ok(());
    };
    let line = serde_json::json!({
        "pid": std::process::id(),
        "addr": addr.to_string(),
        "model": model,
        "stopping": stopping,
    });
    // Written whole then renamed, so a reader never sees half a file.
    let path = std::path::PathBuf::from(path);
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, format!("{line}\n"))
        .and_then(|()| std::fs::rename(&tmp, &path))
        .with_context(|| format!("writing {}", path.display()))
}

/// A server run by `inferd start`: it holds the state folder's lock (inherited as
/// `INFERD_LOCK_FD`) and, when it ends, removes `INFERD_STATE_FILE` and the pid file
/// `INFERD_PID_FILE` if that still names this process.
struct StateFiles;

impl StateFiles {
    fn take() -> Self {
        if let Some(fd) = std::env::var("INFERD_LOCK_FD")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            super::instance::keep_lock_private(fd);
        }
        StateFiles
    }
}

impl Drop for StateFiles {
    fn drop(&mut self) {
        remove_state_files();
    }
}

fn remove_state_files() {
    if let Some(path) = std::env::var_os("INFERD_STATE_FILE") {
        let _ = std::fs::remove_file(path);
    }
    let me = super::instance::Instance::of(std::process::id() as i32);
    if let (Some(path), Some(me)) = (std::env::var_os("INFERD_PID_FILE"), me) {
        super::instance::remove_pid_file_of(std::path::Path::new(&path), me);
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: super::Args,
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
    }

    #[test]
    fn numeric_flags_past_their_ranges_are_refused_by_name() {
        for (flag, value) in [
            ("--max-running", "0"),
            ("--max-batch-tokens", "0"),
            ("--max-prefill-tokens", "0"),
            ("--max-queue", "0"),
            ("--block-size", "0"),
            ("--max-connections", "18446744073709551615"),
            ("--header-timeout", "9223372036854775807"),
            ("--write-timeout", "0"),
            ("--lookahead", "100000"),
        ] {
            let e = parse(&[flag, value]).err().expect(flag).to_string();
            assert!(
                e.contains(flag) && e.contains("is not in"),
                "{flag} {value}: {e}"
            );
        }
        assert!(parse(&["--max-running", "64", "--header-timeout", "10"]).is_ok());
    }
}
