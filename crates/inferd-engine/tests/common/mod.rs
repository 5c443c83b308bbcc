//! Shared helpers for the engine tests: the real SmolLM2-135M model and a collector.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use inferd_engine::{
    ContextSpec, EngineConfig, EngineHandle, Event, FinishReason, GenRequest, KvBudget,
};
use inferd_runtime::{CpuBackend, CpuConfig, Model};
use inferd_text::Tokenizer;

/// The pulled SmolLM2-135M-Instruct GGUF, or `None` (with a note) when absent; with
/// `INFERD_REQUIRE_MODELS=1` absence fails.
pub fn smollm2() -> Option<PathBuf> {
    pulled("smollm2-135m-instruct")
}

/// The GGUF of the built-in model `name` in the model cache (as [`smollm2`]).
pub fn pulled(name: &str) -> Option<PathBuf> {
    let base = std::env::var_os("INFERD_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/inferd")))
        .unwrap_or_default();
    let dir = base.join("models").join(name);
    let found = std::fs::read_dir(&dir).ok().and_then(|rd| {
        rd.filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "gguf"))
    });
    if found.is_none() {
        if std::env::var("INFERD_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
            panic!("{} has no GGUF: run `inferd pull {name}`", dir.display());
        }
        eprintln!("note: {} absent, skipping", dir.display());
    }
    found
}

/// Starts an engine on SmolLM2 with `cfg`; `None` when the model is absent.
pub fn engine(cfg: EngineConfig) -> Option<EngineHandle> {
    engine_on(
        CpuConfig {
            threads: 2,
            ..Default::default()
        },
        cfg,
    )
}

/// [`engine`] on a CPU backend configured as `cpu` says.
pub fn engine_on(cpu: CpuConfig, cfg: EngineConfig) -> Option<EngineHandle> {
    let path = smollm2()?;
    let backend = CpuBackend::with_config(cpu);
    let model = Model::load(backend, &path).expect("load SmolLM2");
    let tok = Tokenizer::from_gguf(model.gguf.as_ref().unwrap()).expect("tokenizer");
    Some(inferd_engine::start(model, Arc::new(tok), "smollm2".into(), cfg).expect("start"))
}

/// Starts an engine on SmolLM2 with `cfg` whose drafts come from the model at `draft`
/// (speculative decoding must be on in `cfg`); `Err` is the engine's refusal.
pub fn engine_with_draft(
    cfg: EngineConfig,
    draft: &std::path::Path,
) -> Option<Result<EngineHandle, inferd_runtime::RuntimeError>> {
    let path = smollm2()?;
    let backend = CpuBackend::with_config(CpuConfig {
        threads: 2,
        ..Default::default()
    });
    let cpu = || backend.sibling();
    let model = Model::load(cpu(), &path).expect("load SmolLM2");
    let tok = Tokenizer::from_gguf(model.gguf.as_ref().unwrap()).expect("tokenizer");
    let dm = Model::load(cpu(), draft).expect("load the draft model");
    let dtok = Tokenizer::from_gguf(dm.gguf.as_ref().unwrap()).expect("draft tokenizer");
    Some(inferd_engine::start_with_draft(
        model,
        Some((dm, Arc::new(dtok))),
        Arc::new(tok),
        "smollm2".into(),
        cfg,
    ))
}

/// A config with a generous KV budget and no warm-up (tests are short).
/// Bytes of one 16-token f32 KV block of SmolLM2 (30 layers, 3 KV heads of 64, K and V).
pub const BLOCK_BYTES: u64 = 16 * 30 * 3 * 64 * 2 * 4;

/// A pinned context `id` of `tokens`, without metadata.
pub fn pinned(id: &str, tokens: Vec<u32>) -> ContextSpec {
    ContextSpec {
        id: Some(id.into()),
        tokens,
        pin: true,
        meta: String::new(),
    }
}

pub fn config() -> EngineConfig {
    EngineConfig {
        kv_budget: KvBudget::Bytes(256 << 20),
        warmup: false,
        ..Default::default()
    }
}

/// Everything a request produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    pub text: String,
    pub tokens: Vec<u32>,
    pub finish: Option<FinishReason>,
    pub completion_tokens: usize,
    pub cached_tokens: usize,
}

pub fn collect(stream: &mut inferd_engine::RequestStream) -> Output {
    let mut o = Output {
        text: String::new(),
        tokens: Vec::new(),
        finish: None,
        completion_tokens: 0,
        cached_tokens: 0,
    };
    while let Some(ev) = stream.next_blocking() {
        match ev {
            Event::Delta(d) => {
                o.text.push_str(&d.text);
                o.tokens.extend(d.tokens.iter().map(|t| t.id));
            }
            Event::Done {
                finish_reason,
                usage,
                ..
            } => {
                o.finish = Some(finish_reason);
                o.completion_tokens = usage.completion_tokens;
                o.cached_tokens = usage.cached_tokens;
                break;
            }
            Event::Error(e) => panic!("engine error: {e}"),
            Event::Rejected(e) => panic!("engine refused the request: {e}"),
        }
    }
    o
}

/// All of `reqs` submitted at once, each collected on its own thread.
pub fn submit_all(e: &EngineHandle, reqs: &[GenRequest]) -> Vec<Output> {
    let mut streams: Vec<_> = reqs.iter().map(|r| e.submit(r.clone()).unwrap()).collect();
    std::thread::scope(|s| {
        let hs: Vec<_> = streams
            .iter_mut()
            .map(|st| s.spawn(move || collect(st)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Replies that must be the same: tokens, text, finish and usage, request by request.
pub fn assert_same(a: &[Output], b: &[Output], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: reply counts differ");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.tokens, y.tokens, "{what}: request {i} tokens differ");
        assert_eq!(x.text, y.text, "{what}: request {i} text differs");
        assert_eq!(x.finish, y.finish, "{what}: request {i} finish differs");
        assert_eq!(
            x.completion_tokens, y.completion_tokens,
            "{what}: request {i} usage differs"
        );
    }
}

/// Runs one request alone to completion.
pub fn run_one(e: &EngineHandle, req: GenRequest) -> Output {
    let mut s = e.submit(req).expect("submit");
    collect(&mut s)
}

/// Distinct prompts of varied lengths: chat-like English text.
pub fn prompts(tok: &Tokenizer, n: usize) -> Vec<Vec<u32>> {
    let topics = [
        "the history of the printing press",
        "how bees communicate",
        "why the sky is blue",
        "the rules of chess",
        "how a compiler works",
        "the water cycle",
        "the life of a star",
        "how vaccines train the immune system",
    ];
    (0..n)
        .map(|i| {
            let t = topics[i % topics.len()];
            let extra = " Please be precise and give one example.".repeat(i % 5);
            let text = format!(
                "<|im_start|>user\nExplain {t} in a few sentences (question {i}).{extra}<|im_end|>\n<|im_start|>assistant\n"
            );
            tok.encode(&text, false).unwrap()
        })
        .collect()
}

/// Waits until `f` holds (engine stats update once per step).
pub fn wait_for(mut f: impl FnMut() -> bool, what: &str) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs one of the handle's async calls (contexts, sessions, cache report) to completion.
#[allow(dead_code)]
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}
