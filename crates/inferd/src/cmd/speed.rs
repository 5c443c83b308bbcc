//! `inferd speed`: prefill and decode throughput of one model, optionally side
//! by side with llama.cpp's `llama-bench` on the same file and thread count.
//! Mirrors llama-bench's tests: `pp P` (one P-token prompt from an empty cache)
//! and `tg N` (N single-token decode steps from an empty cache).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use inferd_core::kv::KvManager;
use inferd_runtime::{ForwardBatch, KvDtype};

use crate::loaded::Loaded;
use crate::pull::DEFAULT_MODEL;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, short, default_value = DEFAULT_MODEL)]
    model: String,
    /// Prompt tokens for the prefill test.
    #[arg(short = 'p', long, default_value_t = 512)]
    prompt_tokens: usize,
    /// Tokens for the decode test.
    #[arg(short = 'n', long, default_value_t = 128)]
    gen_tokens: usize,
    /// Context the decode test starts after (llama-bench's `-d`): that many tokens are
    /// prefilled, untimed, before each repetition's decode steps.
    #[arg(short = 'd', long, default_value_t = 0)]
    depth: usize,
    /// Prompt tokens per forward pass during prefill.
    #[arg(long, default_value_t = 512)]
    chunk: usize,
    /// Repetitions (the best and mean are reported).
    #[arg(short = 'r', long, default_value_t = 3)]
    reps: usize,
    /// Path to llama.cpp's llama-bench: also run it on the same file and threads.
    #[arg(long)]
    llama_bench: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<()> {
    let m = Loaded::open(&a.model)?;
    let threads = m.model.backend.threads();
    let model = &m.model;
    let bs = 16;
    let total = a.prompt_tokens.max(a.depth + a.gen_tokens) + 1;
    let ctx = model.cfg.max_context;
    if a.prompt_tokens == 0 || a.gen_tokens == 0 || a.chunk == 0 || a.reps == 0 {
        bail!("-p, -n, --chunk and -r must be at least 1");
    }
    if total > ctx {
        bail!(
            "the test needs {total} positions (-p, or -d + -n, and one more); the model's \
             context is {ctx}"
        );
    }
    // A hybrid model's one sequence runs in state slot 0 (every pass below starts at
    // position 0 from a zero state, or continues it).
    let layout = model.kv_layout_with_states(total.div_ceil(bs), bs, KvDtype::F32, 1);
    let mut kv = model.alloc_kv(&layout)?;
    let mut kvm = KvManager::new(layout.num_blocks, bs).with_state_slots(layout.state.slots);
    let table = kvm
        .allocate_slots(0, total)
        .expect("pool sized for the test")
        .to_vec();
    // Deterministic pseudo-random prompt over the vocabulary (llama-bench uses random tokens too).
    let vocab = model.cfg.vocab_size as u64;
    let prompt: Vec<u32> = (0..a.prompt_tokens.max(a.depth) as u64)
        .map(|i| ((i * 2654435761 + 12345) % vocab) as u32)
        .collect();

    // warm-up: one short pass touches every weight page
    let mut ws = model.workspace(a.chunk.max(8), 1)?;
    let mut logits = Vec::new();
    let mut b = ForwardBatch::default();
    b.push_in_slot(&prompt[..prompt.len().min(8)], 0, 8, table.clone(), 0, true);
    model.forward_into(&mut ws, &mut kv, &layout, &b, &mut logits)?;

    let mut pp = Vec::new();
    let mut tg = Vec::new();
    // The passes of the first `n` prompt tokens from position 0, `chunk` tokens each.
    let (chunk, prompt_ref, table_ref) = (a.chunk.max(1), &prompt, &table);
    let prefill = move |n: usize| {
        prompt_ref[..n]
            .chunks(chunk)
            .enumerate()
            .map(move |(i, c)| {
                let mut b = ForwardBatch::default();
                b.push_in_slot(c, i * chunk, n, table_ref.clone(), 0, true);
                b
            })
    };
    let mut forward = |b: &ForwardBatch, logits: &mut Vec<f32>| {
        model.forward_into(&mut ws, &mut kv, &layout, b, logits)
    };
    for _ in 0..a.reps {
        let t = Instant::now();
        for b in prefill(a.prompt_tokens) {
            forward(&b, &mut logits)?;
        }
        pp.push(a.prompt_tokens as f64 / t.elapsed().as_secs_f64());
        // The decode test's context (untimed).
        for b in prefill(a.depth) {
            forward(&b, &mut logits)?;
        }
        let t = Instant::now();
        let mut tok = prompt[0];
        for pos in a.depth..a.depth + a.gen_tokens {
            let mut b = ForwardBatch::default();
            // Decode rows are generated tokens after the context (the prompt kept).
            b.push_in_slot(&[tok], pos, a.depth, table.clone(), 0, true);
            forward(&b, &mut logits)?;
            tok = argmax(&logits);
        }
        tg.push(a.gen_tokens as f64 / t.elapsed().as_secs_f64());
    }
    let name = model
        .path
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    println!("| engine | model | threads | test | tok/s (mean) | tok/s (best) |");
    println!("|---|---|---|---|---|---|");
    let row = |engine: &str, test: String, v: &[f64]| {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let best = v.iter().cloned().fold(0.0, f64::max);
        println!("| {engine} | {name} | {threads} | {test} | {mean:.1} | {best:.1} |");
    };
    row("inferd", format!("pp{}", a.prompt_tokens), &pp);
    let at = if a.depth > 0 {
        format!(" @ d{}", a.depth)
    } else {
        String::new()
    };
    row("inferd", format!("tg{}{at}", a.gen_tokens), &tg);
    if let Some(lb) = &a.llama_bench {
        for (test, ts) in llama_bench(lb, &model.path, threads, &a)? {
            row("llama.cpp", test, &ts);
        }
    }
    Ok(())
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Runs llama-bench with JSON output; returns (test name, per-rep tok/s).
fn llama_bench(
    bin: &PathBuf,
    model: &PathBuf,
    threads: usize,
    a: &Args,
) -> Result<Vec<(String, Vec<f64>)>> {
    let out = Command::new(bin)
        .args([
            "-m",
            &model.display().to_string(),
            "-t",
            &threads.to_string(),
        ])
        .args([
            "-p",
            &a.prompt_tokens.to_string(),
            "-n",
            &a.gen_tokens.to_string(),
            "-r",
            &a.reps.to_string(),
        ])
        .args(["-o", "json"])
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "llama-bench failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("parsing llama-bench JSON")?;
    let mut rows = Vec::new();
    for t in v.as_array().into_iter().flatten() {
        let (np, ng) = (
            t["n_prompt"].as_u64().unwrap_or(0),
            t["n_gen"].as_u64().unwrap_or(0),
        );
        let name = if ng == 0 {
            format!("pp{np}")
        } else {
            format!("tg{ng}")
        };
        let samples: Vec<f64> = t["samples_ts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_f64())
            .collect();
        rows.push((name, samples));
    }
    Ok(rows)
}
