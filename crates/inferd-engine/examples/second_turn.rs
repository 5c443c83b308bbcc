//! Second-turn TTFT of a session on a hybrid (or any) model: turn 1 runs a prompt of
//! `--context` tokens with a session and `--reply` tokens of reply; turn 2 sends turn 1's
//! prompt + its reply tokens + `--new` tokens. Timed: turn 2's time to first token
//! resumed from the session's snapshot (prefix cache on) against a full recompute (an
//! engine with the prefix cache off), in one run, `--reps` times each. (The reply was
//! decoded on the 8-bit activation path and is recomputed on the f32 one, so the first
//! tokens may differ at a near-tie; `same token` says.)
//!
//! ```text
//! cargo run --release -p inferd-engine --example second_turn -- MODEL_DIR --context 2048
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use inferd_engine::{EngineConfig, EngineHandle, Event, GenRequest, KvBudget};
use inferd_runtime::{CpuBackend, Model};
use inferd_text::Tokenizer;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn engine(dir: &Path, prefix_cache: bool) -> EngineHandle {
    let model = Model::load(CpuBackend::new(), dir).expect("load");
    let tok = Tokenizer::from_tokenizer_json(&dir.join("tokenizer.json")).expect("tokenizer");
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(2 << 30),
        prefix_cache,
        ..Default::default()
    };
    inferd_engine::start(model, Arc::new(tok), "bench".into(), cfg).expect("start")
}

/// Runs `req`; returns (seconds to the first token, tokens, cached tokens).
fn run(e: &EngineHandle, req: GenRequest) -> (f64, Vec<u32>, usize) {
    let t = Instant::now();
    let mut s = e.submit(req).expect("submit");
    let (mut first, mut tokens) = (None, Vec::new());
    while let Some(ev) = s.next_blocking() {
        match ev {
            Event::Delta(d) => {
                first.get_or_insert(t.elapsed().as_secs_f64());
                tokens.extend(d.tokens.iter().map(|t| t.id));
            }
            Event::Done { usage, .. } => {
                return (first.unwrap_or(0.0), tokens, usage.cached_tokens);
            }
            other => panic!("{other:?}"),
        }
    }
    panic!("stream ended early")
}

fn tokens(n: usize, seed: u32, vocab: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| {
            (i.wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503))
                >> 9)
                % vocab
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(
        args.get(1)
            .expect("usage: second_turn MODEL_DIR [--context N]"),
    );
    let (context, reply, new, reps) = (
        arg(&args, "--context", 2048),
        arg(&args, "--reply", 64),
        arg(&args, "--new", 32),
        arg(&args, "--reps", 3),
    );
    let warm = engine(&dir, true);
    let cold = engine(&dir, false);
    let vocab = 256.min(warm.info.vocab_size as u32);
    let greedy = |p: Vec<u32>, n: usize, session: Option<String>| {
        let mut r = GenRequest::greedy(p, n);
        r.ignore_eos = true;
        r.session = session;
        r
    };
    println!("| context | reply | new | turn 2 prompt | cached | TTFT snapshot ms | TTFT recompute ms | ratio | same token |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for rep in 0..reps {
        let session = Some(format!("s{rep}"));
        let p1 = tokens(context, 1 + rep as u32, vocab);
        let (_, r1, _) = run(&warm, greedy(p1.clone(), reply, session.clone()));
        let mut p2 = p1;
        p2.extend(&r1);
        p2.extend(tokens(new, 1000 + rep as u32, vocab));
        let (t_snap, a, cached) = run(&warm, greedy(p2.clone(), 1, session));
        let (t_full, b, _) = run(&cold, greedy(p2.clone(), 1, None));
        println!(
            "| {context} | {reply} | {new} | {} | {cached} | {:.1} | {:.1} | {:.1}x | {} |",
            p2.len(),
            t_snap * 1e3,
            t_full * 1e3,
            t_full / t_snap,
            a == b
        );
    }
}
