//! `shortchunks`: one sequence's short prompt chunk at the end of a long context (an agent
//! back from a tool), its attention by FlashInfer's SM90 prefill and by its FA2 prefill,
//! which splits the keys (`SplitPrefill`), against a one-row decode step at the same
//! context; each pass timed alone, and the two kernels' logits compared.

use std::path::Path;

use inferd_runtime::{CudaBackend, CudaConfig, ForwardBatch, KvDtype, Model, SplitPrefill};

use super::common::*;
use super::speed::timed_pass;

pub fn shortchunks(model_dir: &Path, context: usize, sizes: &[usize]) {
    let model = Model::load(CudaBackend::new(CudaConfig::default()).unwrap(), model_dir).unwrap();
    let vocab = model.cfg.vocab_size;
    let mut pool = Pool::new(&model, context, KvDtype::Bf16, 1);
    let table = pool.table(context);
    let widest = sizes.iter().copied().max().unwrap_or(1).max(4096);
    let mut ws = model.workspace(widest, 1).unwrap();
    let prompt: Vec<u32> = (0..context)
        .map(|i| ((i * 7919 + 17) % vocab) as u32)
        .collect();
    // The context, read once in passes of 4096.
    for start in (0..context).step_by(4096) {
        let end = (start + 4096).min(context);
        let mut b = ForwardBatch::default();
        b.push(
            &prompt[start..end],
            start,
            context,
            table.clone(),
            end == context,
        );
        timed_pass(&model, &mut ws, &mut pool, &b);
    }
    let pass = |n: usize| {
        let mut b = ForwardBatch::default();
        b.push(
            &prompt[context - n..],
            context - n,
            context,
            table.clone(),
            true,
        );
        b
    };
    // The median of 7 passes (the first of each kernel warms it up), and the last row's logits.
    let time = |mode: SplitPrefill, n: usize, ws: &mut _, pool: &mut _| -> (f64, Vec<f32>) {
        model.backend.set_split_prefill(mode);
        let b = pass(n);
        let mut t: Vec<f64> = (0..7).map(|_| timed_pass(&model, ws, pool, &b).1).collect();
        t.sort_by(f64::total_cmp);
        let mut logits = Vec::new();
        model
            .forward_into(ws, &mut pool.kv, &pool.layout, &b, &mut logits)
            .unwrap();
        (t[3], logits)
    };
    let (decode, _) = time(SplitPrefill::Off, 1, &mut ws, &mut pool);
    println!(
        "shortchunks at {context} keys: one-row decode (eager) {:.2} ms",
        decode * 1e3
    );
    println!(
        "| chunk tokens | SM90 ms | FA2 (split keys) ms | SM90 / FA2 | FA2 runs | max |Δlogit| |"
    );
    println!("|---|---|---|---|---|---|");
    for &n in sizes {
        let (sm90, a) = time(SplitPrefill::Off, n, &mut ws, &mut pool);
        let runs = model.backend.split_runs();
        let (fa2, b) = time(SplitPrefill::Always, n, &mut ws, &mut pool);
        let runs = model.backend.split_runs() - runs;
        println!(
            "| {n} | {:.2} | {:.2} | {:.2} | {runs} | {:.3e} |",
            sm90 * 1e3,
            fa2 * 1e3,
            sm90 / fa2,
            max_abs(&a, &b)
        );
    }
    model.backend.set_split_prefill(SplitPrefill::Off);
}
