//! `profile`, `timeline` and `kernels`: a step under ncu, and the kernels' own stamps.

use std::path::Path;
use std::time::Instant;

use inferd_runtime::{Backend, CudaBackend, ForwardBatch, KvDtype, Model};

use super::common::*;

/// One eager decode step of `batch` sequences over `context` tokens each inside the
/// profiler's capture range (for `ncu --profile-from-start off`), after two warm-up steps;
/// with `prefill: Some(chunk)`, instead one pass of the last `chunk` tokens of `batch`
/// `context`-token prompts (their earlier tokens prefilled before, one sequence a pass),
/// after a warm-up pass of the same shape on other slots. `chunk == context` is the
/// prefill pass that `speed` times.
pub fn profile(
    model_dir: &Path,
    context: usize,
    batch: usize,
    no_gemv: bool,
    prefill: Option<usize>,
) {
    let cfg = inferd_runtime::CudaConfig {
        no_graphs: true,
        no_gemv,
        ..Default::default()
    };
    let model = Model::load(CudaBackend::new(cfg).unwrap(), model_dir).unwrap();
    let vocab = model.cfg.vocab_size;
    let seqs = if prefill.is_some() { 2 * batch } else { batch };
    let mut pool = Pool::new(&model, seqs * (context + 4), KvDtype::Bf16, seqs);
    let chunk = prefill.map_or(0, |c| c.min(context));
    let mut ws = model
        .workspace((batch * chunk).max(context).max(batch), seqs)
        .unwrap();
    let tables: Vec<Vec<u32>> = (0..seqs).map(|_| pool.table(context + 4)).collect();
    let ids = |s: usize| token_prompt(s, context, vocab);
    let run = |pool: &mut Pool<CudaBackend>, ws: &mut _, b: &ForwardBatch| {
        model.forward_in(ws, &mut pool.kv, &pool.layout, b).unwrap();
        model.backend.synchronize().unwrap();
    };
    if prefill.is_some() {
        // Every sequence's head, one a pass; then the warm-up pass (slots batch..2·batch)
        // and the profiled one (slots 0..batch), each over `batch` last chunks.
        for (s, table) in tables.iter().enumerate().filter(|_| chunk < context) {
            let mut b = ForwardBatch::default();
            b.push_in_slot(
                &ids(s)[..context - chunk],
                0,
                context,
                table.clone(),
                s as u32,
                true,
            );
            run(&mut pool, &mut ws, &b);
        }
        for profiled in [false, true] {
            let mut b = ForwardBatch::default();
            for s in (0..batch).map(|s| if profiled { s } else { s + batch }) {
                let tail = &ids(s)[context - chunk..];
                b.push_in_slot(
                    tail,
                    context - chunk,
                    context,
                    tables[s].clone(),
                    s as u32,
                    true,
                );
            }
            CudaBackend::profiler(profiled);
            let t = Instant::now();
            run(&mut pool, &mut ws, &b);
            CudaBackend::profiler(false);
            if profiled {
                println!(
                    "profiled prefill: {batch} x {chunk} tokens at {}: {:.2} ms ({:.0} tok/s)",
                    context - chunk,
                    t.elapsed().as_secs_f64() * 1e3,
                    (batch * chunk) as f64 / t.elapsed().as_secs_f64()
                );
            }
        }
        return;
    }
    for (s, table) in tables.iter().enumerate() {
        let mut b = ForwardBatch::default();
        b.push_in_slot(&ids(s), 0, context, table.clone(), s as u32, true);
        run(&mut pool, &mut ws, &b);
    }
    for step in 0..3 {
        let mut b = ForwardBatch::default();
        for (s, table) in tables.iter().enumerate() {
            b.push_in_slot(&[1], context + step, context, table.clone(), s as u32, true);
        }
        CudaBackend::profiler(step == 2);
        let t = Instant::now();
        run(&mut pool, &mut ws, &b);
        CudaBackend::profiler(false);
        if step == 2 {
            println!(
                "profiled step: batch {batch}, context {context}, {}: {:.2} ms",
                if no_gemv { "cuBLASLt" } else { "gemv" },
                t.elapsed().as_secs_f64() * 1e3
            );
        }
    }
}

/// ROWS sequences prefilled to CONTEXT tokens on the GPU, then one-token decode steps of
/// all of them (default settings: the first steps capture the graph, later ones replay it).
pub struct DecodeRig {
    model: Model<CudaBackend>,
    pool: Pool<CudaBackend>,
    ws: inferd_runtime::Workspace<CudaBackend>,
    tables: Vec<Vec<u32>>,
    context: usize,
}

impl DecodeRig {
    pub fn new(model_dir: &Path, context: usize, rows: usize, steps: usize) -> Self {
        Self::with(model_dir, context, rows, steps, Default::default())
    }

    pub fn with(
        model_dir: &Path,
        context: usize,
        rows: usize,
        steps: usize,
        cfg: inferd_runtime::CudaConfig,
    ) -> Self {
        let model = Model::load(CudaBackend::new(cfg).unwrap(), model_dir).unwrap();
        let vocab = model.cfg.vocab_size;
        let mut pool = Pool::new(&model, rows * (context + steps + 1), KvDtype::Bf16, rows);
        let ws = model.workspace(context.max(rows), rows).unwrap();
        let tables: Vec<Vec<u32>> = (0..rows).map(|_| pool.table(context + steps + 1)).collect();
        let mut rig = DecodeRig {
            model,
            pool,
            ws,
            tables,
            context,
        };
        for s in 0..rows {
            let ids = token_prompt(s, context, vocab);
            let mut b = ForwardBatch::default();
            b.push_in_slot(&ids, 0, context, rig.tables[s].clone(), s as u32, true);
            rig.run(&b);
        }
        rig
    }

    pub fn run(&mut self, b: &ForwardBatch) {
        let layout = &self.pool.layout;
        self.model
            .forward_in(&mut self.ws, &mut self.pool.kv, layout, b)
            .unwrap();
        self.model.backend.synchronize().unwrap();
    }

    /// Decode step `step` (0, 1, …) of every sequence; ms on the wall.
    pub fn step(&mut self, step: usize) -> f64 {
        let mut b = ForwardBatch::default();
        for (s, table) in self.tables.iter().enumerate() {
            b.push_in_slot(
                &[1],
                self.context + step,
                self.context,
                table.clone(),
                s as u32,
                true,
            );
        }
        let t = Instant::now();
        self.run(&b);
        t.elapsed().as_secs_f64() * 1e3
    }
}

/// `cuda_check timeline DIR CONTEXT [ROWS]`: where one launch of the decode attention
/// spends its time inside a replayed decode step (ROWS rows at CONTEXT tokens, default
/// settings): the kernels' stage stamps (`CudaBackend::decode_probe`) of the step's last
/// layer, as µs from the first block's entry, the least, median and most over the blocks.
pub fn timeline(model_dir: &Path, context: usize, rows: usize, narrow: bool) {
    use inferd_runtime::{PROBE_STAGES, PROBE_STAGE_NAMES};
    let steps = 6;
    let cfg = inferd_runtime::CudaConfig {
        no_wide_decode: narrow,
        ..Default::default()
    };
    let mut rig = DecodeRig::with(model_dir, context, rows, steps, cfg);
    let most = rows * rig.model.cfg.n_kv_heads * 64;
    // The first steps capture the graph; the probed ones replay it.
    for step in 0..steps {
        if step >= 3 {
            rig.model.backend.decode_probe(most).unwrap();
        }
        let ms = rig.step(step);
        if step < 3 {
            continue;
        }
        let stamps = rig.model.backend.decode_probe_read().unwrap();
        rig.model.backend.decode_probe(0).unwrap();
        let blocks: Vec<&[u64]> = stamps
            .chunks_exact(PROBE_STAGES)
            .filter(|b| b[0] != 0)
            .collect();
        let Some(t0) = blocks.iter().map(|b| b[0]).min() else {
            println!("step {step}: no decode kernel stamped (another kernel attends these rows)");
            continue;
        };
        println!(
            "step {step}: {rows} row(s) at {context} tokens, {:.2} ms on the wall; the last layer's \
             decode attention: {} blocks ({} splits), µs from the first entry (least / median / most)",
            ms,
            blocks.len(),
            blocks.len() / (rows * rig.model.cfg.n_kv_heads).max(1)
        );
        for (stage, name) in PROBE_STAGE_NAMES.iter().enumerate() {
            // Stages 7.. are stamped by a (row, KV head)'s last block only: older stamps in the
            // other blocks' slots are the step's earlier layers'.
            let mut at: Vec<f64> = blocks
                .iter()
                .filter(|b| b[stage] >= t0)
                .map(|b| (b[stage] - t0) as f64 / 1e3)
                .collect();
            if at.is_empty() {
                continue;
            }
            at.sort_by(f64::total_cmp);
            println!(
                "  {stage} {name:<22} {:>4} blocks  {:7.2} {:7.2} {:7.2}",
                at.len(),
                at[0],
                at[at.len() / 2],
                at[at.len() - 1]
            );
        }
    }
}

/// `cuda_check kernels DIR CONTEXT [ROWS]`: the chain of a replayed decode step, launch by
/// launch, from every block's stamps (`CudaBackend::kernel_probe`: our gemv, norm, fused
/// and decode attention kernels; cuBLASLt's and FlashInfer's are not stamped). For each
/// kind of launch (its unit, blocks, and the unit of the launch before it), averaged over
/// the step's launches of that kind: how far it moves the chain's end (its last block done
/// after the launch before's), when its last wait returned after the launch before was
/// done, and its span from first entry to last done; then two layers launch by launch.
pub fn kernels(model_dir: &Path, context: usize, rows: usize) {
    use inferd_runtime::{kernel_launches, KERNEL_UNITS};
    let steps = 5;
    let mut rig = DecodeRig::new(model_dir, context, rows, steps);
    for step in 0..steps {
        if step >= 3 {
            rig.model.backend.kernel_probe(1 << 20).unwrap();
        }
        let ms = rig.step(step);
        if step < 3 {
            continue;
        }
        let (stamps, full) = rig.model.backend.kernel_probe_read().unwrap();
        rig.model.backend.kernel_probe(0).unwrap();
        let launches = kernel_launches(&stamps);
        let Some(first) = launches.first() else {
            println!("step {step}: nothing stamped");
            continue;
        };
        let (t0, end) = (
            first.first_entry,
            launches.iter().map(|l| l.last_done).max().unwrap(),
        );
        println!(
            "step {step}: {rows} row(s) at {context} tokens, {ms:.2} ms on the wall; {} launches \
             stamped over {:.3} ms{}",
            launches.len(),
            (end - t0) as f64 / 1e6,
            if full {
                " (some stamps lost: region full)"
            } else {
                ""
            }
        );
        let us = |a: u64, b: u64| (a as f64 - b as f64) / 1e3;
        // kind -> (count, Σ chain increment, Σ wait lag, Σ span), µs
        let mut kinds: Vec<(String, usize, f64, f64, f64)> = Vec::new();
        for w in launches.windows(2) {
            let (prev, l) = (&w[0], &w[1]);
            if l.last_done == 0 || prev.last_done == 0 {
                continue;
            }
            let kind = format!(
                "{} x{} after {}",
                KERNEL_UNITS[l.unit], l.grid, KERNEL_UNITS[prev.unit]
            );
            let at = match kinds.iter().position(|k| k.0 == kind) {
                Some(i) => i,
                None => {
                    kinds.push((kind, 0, 0.0, 0.0, 0.0));
                    kinds.len() - 1
                }
            };
            let k = &mut kinds[at];
            k.1 += 1;
            k.2 += us(l.last_done, prev.last_done);
            k.3 += us(l.last_waited, prev.last_done);
            k.4 += us(l.last_done, l.first_entry);
        }
        println!("  | launch kind | launches | chain end moved, µs | last wait returned after the launch before done, µs | first entry to last done, µs | chain total, ms |");
        println!("  |---|---:|---:|---:|---:|---:|");
        for (kind, n, inc, lag, span) in &kinds {
            let c = *n as f64;
            println!(
                "  | {kind} | {n} | {:.2} | {:.2} | {:.2} | {:.3} |",
                inc / c,
                lag / c,
                span / c,
                inc / 1e3
            );
        }
        // Two layers in the middle, launch by launch (µs from the step's first entry).
        let per_layer = (launches.len() / rig.model.cfg.n_layers).max(1);
        let from = (launches.len() / 2 / per_layer) * per_layer;
        println!("  launches {from}..{}: unit, blocks, first entry, last entry, last wait returned, last done (µs)", from + 2 * per_layer);
        for l in launches.iter().skip(from).take(2 * per_layer) {
            println!(
                "    {:<7} x{:<6} {:9.2} {:9.2} {:9.2} {:9.2}",
                KERNEL_UNITS[l.unit],
                l.grid,
                us(l.first_entry, t0),
                us(l.last_entry, t0),
                us(l.last_waited, t0),
                us(l.last_done, t0)
            );
        }
    }
}
