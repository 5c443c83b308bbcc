//! `gemmpick`: a long prompt prefilled in the fleet's passes of 4096 tokens, its products
//! by each of cuBLASLt's heuristic candidates in turn (`CudaBackend::set_gemm_pick`), for
//! as long as the GPU takes to reach its power cap: which candidate runs fastest under it.

use std::path::Path;

use inferd_runtime::{CudaBackend, CudaConfig, KvDtype, Model};

use super::common::{token_prompt, Pool};
use super::speed::prefill_passes;

/// Tokens a pass: the fleet's prompt slice.
const PASS: usize = 4096;

/// `cuda_check gemmpick MODEL_DIR [CONTEXT] [PICK+PICK…] [ROUNDS] [PROMPTS]`: ROUNDS
/// rounds (default 3), in each every pick in turn prefilling PROMPTS (default 4) prompts
/// of CONTEXT tokens (16384) one after another in passes of 4096 tokens; prints each
/// pick's prompt tokens a second in every round and the algorithm each product took.
pub fn gemmpick(model_dir: &Path, context: usize, picks: &[usize], rounds: usize, prompts: usize) {
    let model = Model::load(CudaBackend::new(CudaConfig::default()).unwrap(), model_dir).unwrap();
    let vocab = model.cfg.vocab_size;
    let mut pool = Pool::new(&model, context, KvDtype::Bf16, 1);
    let mut ws = model.workspace(PASS, 1).unwrap();
    let prompt = [token_prompt(0, context, vocab)];
    let table = [pool.table(context)];
    // Seconds to prefill the prompt `prompts` times, in passes of PASS tokens.
    let mut prefill = || -> f64 {
        (0..prompts)
            .map(|_| -> f64 {
                prefill_passes(&model, &mut ws, &mut pool, &prompt, &table, PASS)
                    .iter()
                    .sum()
            })
            .sum()
    };
    let mut seen = vec![Vec::new(); picks.len()];
    let mut rates = vec![Vec::new(); picks.len()];
    for round in 0..=rounds {
        for (i, &pick) in picks.iter().enumerate() {
            model.backend.set_gemm_pick(pick);
            let s = prefill();
            // Round 0 warms the GPU up to its cap and plans every shape: not counted.
            if round == 0 {
                seen[i] = model.backend.gemm_choices();
            } else {
                rates[i].push((prompts * context) as f64 / s);
            }
        }
    }
    model.backend.set_gemm_pick(0);
    println!(
        "gemmpick: {prompts} prompt(s) of {context} tokens in passes of {PASS}, each pick in turn, {rounds} round(s) after one to warm up"
    );
    println!("| candidate | prompt tok/s by round | median |");
    println!("|---|---|---|");
    for (i, &pick) in picks.iter().enumerate() {
        let mut r = rates[i].clone();
        r.sort_by(f64::total_cmp);
        let by_round: Vec<String> = rates[i].iter().map(|v| format!("{v:.0}")).collect();
        println!(
            "| {pick} | {} | {:.0} |",
            by_round.join(" / "),
            r.get(r.len() / 2).copied().unwrap_or(0.0)
        );
    }
    for (i, &pick) in picks.iter().enumerate() {
        println!("candidate {pick}:");
        for line in &seen[i] {
            println!("  {line}");
        }
    }
}
