//! `shortchunks`: short prompt chunks at the end of a long context (agents back from a
//! tool), `seqs` of them in one pass (forked: the context's pages shared, each its own
//! last `TAIL` tokens), their attention by FlashInfer's SM90 prefill and by its FA2
//! prefill, which splits the keys (`SplitPrefill`), against a one-row decode step at the
//! same context; each pass timed alone, the two kernels' logits compared, and the first
//! sequence's logits in the pass against its chunk's pass alone by each kernel (cuBLASLt
//! rounds a pass of other rows differently in the last bits; the FA2 plans, whose
//! pieces follow each chunk alone, add nothing of their own). Over an 8-bit pool both
//! kernels read the pass's bf16 copies of the pages.

use std::path::Path;

use inferd_runtime::{CudaBackend, CudaConfig, ForwardBatch, KvDtype, Model, SplitPrefill};

use super::common::*;
use super::speed::{median_pass, prefill_passes, timed_pass};

/// Each sequence's own last tokens (the rest of the context is the first's).
const TAIL: usize = 1024;

pub fn shortchunks(model_dir: &Path, context: usize, sizes: &[usize], seqs: usize, dtype: KvDtype) {
    let model = Model::load(CudaBackend::new(CudaConfig::default()).unwrap(), model_dir).unwrap();
    let vocab = model.cfg.vocab_size;
    let seqs = seqs.max(1);
    let tail = sizes
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(TAIL)
        .next_multiple_of(BLOCK);
    assert!(
        context > tail && context.is_multiple_of(BLOCK),
        "CONTEXT: a multiple of {BLOCK} past {tail}"
    );
    let mut pool = Pool::new(&model, context + seqs * tail, dtype, seqs);
    let first = pool.table(context);
    let shared = (context - tail) / BLOCK;
    // [seqs] block tables: the first sequence's context, then each one's own tail.
    let tables: Vec<Vec<u32>> = (0..seqs)
        .map(|i| match i {
            0 => first.clone(),
            _ => first[..shared]
                .iter()
                .copied()
                .chain(pool.table(tail))
                .collect(),
        })
        .collect();
    let widest = (seqs * tail).max(4096);
    let mut ws = model.workspace(widest, seqs).unwrap();
    let prompt: Vec<u32> = (0..context)
        .map(|i| ((i * 7919 + 17) % vocab) as u32)
        .collect();
    // The context, read once in passes of 4096; then the other sequences' tails.
    prefill_passes(
        &model,
        &mut ws,
        &mut pool,
        std::slice::from_ref(&prompt),
        std::slice::from_ref(&first),
        4096,
    );
    if seqs > 1 {
        let mut b = ForwardBatch::default();
        for t in &tables[1..] {
            b.push(
                &prompt[context - tail..],
                context - tail,
                context,
                t.clone(),
                true,
            );
        }
        timed_pass(&model, &mut ws, &mut pool, &b);
    }
    // The last `n` tokens of the first `k` sequences, in one pass.
    let pass = |n: usize, k: usize| {
        let mut b = ForwardBatch::default();
        for t in &tables[..k] {
            b.push(
                &prompt[context - n..],
                context - n,
                context,
                t.clone(),
                true,
            );
        }
        b
    };
    // The median of 7 passes (the first of each kernel warms it up), and the pass's
    // last-row logits, `vocab` a sequence.
    let time = |mode: SplitPrefill, n: usize, k: usize, ws: &mut _, pool: &mut _| {
        model.backend.set_split_prefill(mode);
        let b = pass(n, k);
        let median = median_pass(&model, ws, pool, &b, 7);
        let mut logits = Vec::new();
        model
            .forward_into(ws, &mut pool.kv, &pool.layout, &b, &mut logits)
            .unwrap();
        (median, logits)
    };
    let (decode, _) = time(SplitPrefill::Off, 1, 1, &mut ws, &mut pool);
    println!(
        "shortchunks at {context} keys, {seqs} sequences a pass, {} KV: one-row decode (eager) {:.2} ms",
        dtype.name(),
        decode * 1e3
    );
    println!(
        "| chunk tokens | SM90 ms | FA2 (split keys) ms | SM90 / FA2 | FA2 plans | Auto's FA2 plans | max |Δlogit| SM90 vs FA2 | first sequence, pass vs alone: SM90 | FA2 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &n in sizes {
        let (sm90, a) = time(SplitPrefill::Off, n, seqs, &mut ws, &mut pool);
        let before = model.backend.split_runs();
        let (fa2, b) = time(SplitPrefill::Always, n, seqs, &mut ws, &mut pool);
        let plans = (model.backend.split_runs() - before) / 8;
        let before = model.backend.split_runs();
        time(SplitPrefill::Auto, n, seqs, &mut ws, &mut pool);
        let auto = (model.backend.split_runs() - before) / 8;
        let (_, alone90) = time(SplitPrefill::Off, n, 1, &mut ws, &mut pool);
        let (_, alone) = time(SplitPrefill::Always, n, 1, &mut ws, &mut pool);
        println!(
            "| {n} | {:.2} | {:.2} | {:.2} | {plans} | {auto} | {:.3e} | {:.3e} | {:.3e} |",
            sm90 * 1e3,
            fa2 * 1e3,
            sm90 / fa2,
            max_abs(&a, &b),
            max_abs(&alone90, &a[..vocab]),
            max_abs(&alone, &b[..vocab]),
        );
    }
    model.backend.set_split_prefill(SplitPrefill::Off);
}
