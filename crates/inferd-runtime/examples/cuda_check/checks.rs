//! `checks`: speculative checks (each sequence a chunk of its decoded token and drafts,
//! every row's logits) timed as decode rows replayed from a graph
//! (`CudaBackend::set_decode_chunk_tokens(8)`), as eager prompt chunks (`1`) and as the
//! default policy takes them (`0`: decode rows while they read few positions again),
//! against a plain decode step.

use std::path::Path;

use inferd_runtime::{CudaBackend, CudaConfig, ForwardBatch, KvDtype, Model};

use super::common::*;
use super::speed::timed_pass;

/// `cuda_check checks MODEL_DIR [CONTEXT] [AGENTS+AGENTS…]`: for each number of agents (1
/// and 8 by default) over CONTEXT prefilled tokens each (4096), a pass of every agent's
/// check of 1, 2, 3, 5 and 9 tokens (1 is a plain decode step; 9 is past a decode bucket's
/// chunks either way), each pass writing the same positions again (as rejected drafts do),
/// forward ms over 16 passes each way.
pub fn checks(model_dir: &Path, context: usize, agents: &[usize]) {
    let model = Model::load(CudaBackend::new(CudaConfig::default()).unwrap(), model_dir).unwrap();
    let vocab = model.cfg.vocab_size;
    let lens = [1usize, 2, 3, 5, 9];
    let most = agents.iter().copied().max().unwrap_or(1);
    let longest = lens.iter().copied().max().unwrap();
    let mut pool = Pool::new(&model, most * (context + longest + 16), KvDtype::Bf16, most);
    let mut ws = model.workspace(8 * context, most * longest).unwrap();
    let tables: Vec<Vec<u32>> = (0..most)
        .map(|_| pool.table(context + longest + 1))
        .collect();
    for (s, table) in tables.iter().enumerate() {
        let p = token_prompt(s, context, vocab);
        let mut b = ForwardBatch::default();
        b.push_in_slot(&p, 0, context, table.clone(), s as u32, true);
        timed_pass(&model, &mut ws, &mut pool, &b);
    }
    println!("| agents | check tokens | rows | decode rows, graph ms | prompt chunks, eager ms | eager / graph | default ms | graph / plain decode |");
    println!("|---|---|---|---|---|---|---|---|");
    for &n in agents {
        let mut plain = 0.0;
        for &k in &lens {
            let mut b = ForwardBatch::default();
            for (s, table) in tables.iter().enumerate().take(n) {
                let t: Vec<u32> = (0..k)
                    .map(|i| ((s * 31 + i * 17 + 5) % vocab) as u32)
                    .collect();
                b.push_in_slot(&t, context, context, table.clone(), s as u32, true);
            }
            b.logits_rows = (0..b.n_tokens()).collect();
            let mut time = |tokens: usize| {
                model.backend.set_decode_chunk_tokens(tokens);
                let mut total = 0.0;
                for step in 0..18 {
                    let (_, whole) = timed_pass(&model, &mut ws, &mut pool, &b);
                    if step >= 2 {
                        total += whole; // after the eager pass and the capture
                    }
                }
                total / 16.0 * 1e3
            };
            let graph = time(8);
            let eager = time(1);
            let default = time(0);
            if k == 1 {
                plain = graph;
            }
            println!(
                "| {n} | {k} | {} | {graph:.2} | {eager:.2} | {:.2} | {default:.2} | {:.2} |",
                n * k,
                eager / graph,
                graph / plain
            );
        }
    }
}
