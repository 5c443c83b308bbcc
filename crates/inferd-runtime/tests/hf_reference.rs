//! Tiny random Llama / Qwen2 / Qwen3 models (safetensors + config.json) against
//! the logits and greedy continuations Hugging Face transformers computed for
//! them (`fixtures/models/`, made by `scripts/fixtures/make_tiny_models.py`).
//!
//! Tolerance, per backend ([`common::profile`]): the reference ran in float32 on the
//! same (bf16/f16/f32-rounded) weights, so an f32 implementation (CPU) differs only by
//! summation order: |Δlogit| ≤ 2e-3 (logits are O(1..10)); a bf16 one (CUDA) by its
//! roundings. Top-1 must agree wherever the reference's top-1/top-2 margin exceeds
//! twice the tolerance.

mod common;

use common::*;
use inferd_runtime::{Backend, CpuBackend, ForwardBatch, Model};
use serde_json::Value;

fn load_reference(name: &str) -> Value {
    let p = repo_root()
        .join("fixtures/models")
        .join(name)
        .join("reference.json");
    serde_json::from_str(
        &std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

/// Logits, top-1 and the greedy 64-token continuation of every prompt equal the reference.
fn matches_transformers<B: Backend>(backend: B, name: &str) {
    let tol = profile(&backend).logit_tol;
    let model = Model::load(backend, &repo_root().join("fixtures/models").join(name)).unwrap();
    let r = load_reference(name);
    let mut run = Runner::new(&model, 256);
    for p in r["prompts"].as_array().unwrap() {
        let input = ids(&p["input_ids"]);
        let logits = run.prompt_logits(&input, input.len());
        let margins = floats(&p["margin"]);
        let top1 = ids(&p["top1"]);
        for (i, (row, want)) in logits
            .iter()
            .zip(p["logits"].as_array().unwrap())
            .enumerate()
        {
            let d = max_abs_diff(row, &floats(want));
            assert!(
                d <= tol,
                "{name} {}: position {i}: max |Δlogit| {d} > {tol}",
                p["name"]
            );
            if margins[i] > 2.0 * tol {
                assert_eq!(
                    argmax(row),
                    top1[i],
                    "{name} {}: top-1 at position {i}",
                    p["name"]
                );
            }
        }
        let got = run.greedy(&input, ids(&p["greedy"]).len());
        assert_greedy_matches(&got, p, tol, name);
    }
}

/// One pass over all prompts together (each with its own block table) equals each alone.
fn batched_equals_single<B: Backend>(backend: B, name: &str) {
    let tol = profile(&backend).batch_tol;
    let model = Model::load(backend, &repo_root().join("fixtures/models").join(name)).unwrap();
    let r = load_reference(name);
    let prompts: Vec<Vec<u32>> = r["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ids(&p["input_ids"]))
        .collect();
    let mut run = Runner::new(&model, 256);
    let alone: Vec<Vec<Vec<f32>>> = prompts
        .iter()
        .map(|p| run.prompt_logits(p, p.len()))
        .collect();

    let mut b = ForwardBatch::default();
    for p in &prompts {
        let (_, table) = run.new_seq(p.len());
        b.push(p, 0, p.len(), table, false);
    }
    b.logits_rows = (0..b.tokens.len()).collect();
    let all = model.forward(&mut run.kv, &run.layout, &b).unwrap();
    let vocab = model.cfg.vocab_size;
    let mut row = 0;
    for (pi, p) in prompts.iter().enumerate() {
        for i in 0..p.len() {
            let d = max_abs_diff(&all[row * vocab..(row + 1) * vocab], &alone[pi][i]);
            assert!(
                d <= tol,
                "{name}: prompt {pi} position {i}: batched differs by {d}"
            );
            row += 1;
        }
    }
}

/// Prefill in small chunks (crossing KV blocks) equals one pass.
fn chunked_equals_whole<B: Backend>(backend: B, name: &str) {
    let tol = profile(&backend).batch_tol;
    let model = Model::load(backend, &repo_root().join("fixtures/models").join(name)).unwrap();
    let r = load_reference(name);
    let longest = r["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ids(&p["input_ids"]))
        .max_by_key(|p| p.len())
        .unwrap();
    let mut run = Runner::new(&model, 256);
    let whole = run.prompt_logits(&longest, longest.len());
    for chunk in [1, 3, 5, 16] {
        let parts = run.prompt_logits(&longest, chunk);
        for (i, (a, b)) in whole.iter().zip(&parts).enumerate() {
            let d = max_abs_diff(a, b);
            assert!(
                d <= tol,
                "{name}: chunk {chunk}, position {i}: differs by {d}"
            );
        }
    }
}

macro_rules! backend_tests {
    ($modname:ident, $backend:expr) => {
        mod $modname {
            use super::*;
            #[test]
            fn llama_matches_transformers() {
                matches_transformers($backend, "llama");
            }
            #[test]
            fn qwen2_matches_transformers() {
                matches_transformers($backend, "qwen2");
            }
            #[test]
            fn qwen3_matches_transformers() {
                matches_transformers($backend, "qwen3");
            }
            #[test]
            fn batched_equals_single_all_archs() {
                for name in ["llama", "qwen2", "qwen3"] {
                    batched_equals_single($backend, name);
                }
            }
            #[test]
            fn chunked_prefill_equals_whole() {
                for name in ["llama", "qwen2", "qwen3"] {
                    chunked_equals_whole($backend, name);
                }
            }
        }
    };
}

backend_tests!(cpu, CpuBackend::new());

#[cfg(feature = "cuda")]
backend_tests!(
    cuda,
    match cuda() {
        Some(b) => b,
        None => return,
    }
);
