//! `speed`, `chunks` and `fibench`: decode steps, prefill passes and prompt attention timed.

use std::path::Path;
use std::time::Instant;

use inferd_core::sampling::{Extra, Sampler, SamplingParams};
use inferd_runtime::{Backend, CudaBackend, ForwardBatch, KvDtype, Model, SampleRow};

use super::common::*;

/// Bytes a decode step must move: every weight matrix but the input embedding, and the
/// state: the KV read (scales included), and a hybrid model's recurrent state read and
/// written per sequence.
pub fn step_bytes<B: Backend>(
    model: &Model<B>,
    batch: usize,
    context: usize,
    dtype: KvDtype,
) -> (f64, f64) {
    let c = &model.cfg;
    let ffn = 3 * c.hidden * c.ffn_dim;
    let attention = c.hidden * (c.q_proj_dim() + 2 * c.kv_dim()) + c.q_dim() * c.hidden;
    let mut matrices = (c.kv_layer_count() * (attention + ffn)) as f64;
    let mut state = 0.0;
    if let Some(la) = c.linear.as_ref().filter(|_| c.state_layer_count() > 0) {
        let delta_net = c.hidden * (la.conv_dim() + la.value_dim() + 2 * la.n_v_heads)
            + la.value_dim() * c.hidden;
        matrices += (c.state_layer_count() * (delta_net + ffn)) as f64;
        let per_seq = c.state_layer_count() * (la.conv_state_elems() + la.delta_state_elems());
        state = 2.0 * 4.0 * (batch * per_seq) as f64;
    }
    let weights = 2.0 * (matrices + (c.vocab_size * c.hidden) as f64);
    let kv = 2.0
        * (batch * context * c.kv_layer_count() * c.n_kv_heads) as f64
        * dtype.row_bytes(c.head_dim) as f64;
    (weights, kv + state)
}

/// `cuda_check speed DIR CONTEXT SPEC,…`: `speed` once per spec, a KV dtype (bf16, q8,
/// fp8) followed by any of (`:`-separated):
/// - `inferd`: decode attention by our SIMT kernel at every row count; `mma`: by its
///   tensor-core build at every row count;
/// - `loadsN`: the SIMT matrix-vector kernel with N loads in flight a lane;
/// - `splits=N`: decode attention in N splits at every row count (with `clusters`, the
///   tensor-core build's cluster form where N is 2..=16 and the clusters fit: blocks of 4
///   warps, else of 8);
/// - `clusters`: the decode splits merged in the tensor-core build's cluster form where
///   its clusters fit (by default through L2 by the last block);
/// - `narrow`: passes of few rows in the tensor-core build's plain grid (by default its wide
///   form where it fits: blocks of 8 warps, one a multiprocessor, half the splits;
///   `splits::wide_splits`);
/// - `paged` / `contig`: prompt chunks' attention over the pool's pages / a contiguous copy
///   (default: by the policy);
/// - `rows=N+N…`: only these batch sizes (and only as many sequences prefilled);
/// - `skip=OP+OP…`: ops left out of every pass (profiling: what each costs in a graph;
///   the names of `SkipOps::parse`).
pub fn speed_by_dtype(model_dir: &Path, context: usize, specs: &str) {
    use inferd_runtime::{CudaConfig, DecodeAttention, SkipOps};
    for spec in specs.split(',') {
        let mut parts = spec.split(':');
        let name = parts.next().unwrap_or_default();
        let dtype = KvDtype::from_name(name).expect("a KV dtype: bf16, q8, fp8");
        let mut cfg = CudaConfig::default();
        let mut said = Vec::new();
        let mut batches = BATCHES.to_vec();
        for opt in parts {
            if opt == "inferd" {
                cfg.decode = DecodeAttention::Inferd;
                said.push("decode attention by inferd's at every row count".to_string());
            } else if opt == "mma" {
                cfg.decode = DecodeAttention::TensorCores;
                said.push("decode attention by its tensor-core build at every row count".into());
            } else if let Some(n) = opt.strip_prefix("loads") {
                cfg.gemv_loads = n.parse().expect("loadsN");
                said.push(format!("gemv with {n} loads in flight a lane"));
            } else if let Some(n) = opt.strip_prefix("splits=") {
                cfg.decode_splits = n.parse().expect("splits=N");
                said.push(match cfg.decode_splits {
                    0 => "decode attention splits by the policy".to_string(),
                    n => format!("decode attention in {n} splits"),
                });
            } else if opt == "clusters" {
                cfg.cluster_merge = true;
                said.push("decode splits merged in thread-block clusters where they fit".into());
            } else if opt == "narrow" {
                cfg.no_wide_decode = true;
                said.push("few rows' decode attention in the plain grid, not the wide form".into());
            } else if opt == "unfused" {
                cfg.no_gemv_swiglu = true;
                said.push("one row's gate|up product and its SwiGLU in two kernels".into());
            } else if opt == "paged" || opt == "contig" {
                cfg.prefill_kv = if opt == "paged" {
                    inferd_runtime::PrefillKv::Paged
                } else {
                    inferd_runtime::PrefillKv::Contiguous
                };
                said.push(format!("prompt attention over {opt} K/V"));
            } else if let Some(list) = opt.strip_prefix("rows=") {
                batches = list
                    .split('+')
                    .map(|n| n.parse().expect("rows=N+N"))
                    .collect();
            } else if let Some(ops) = opt.strip_prefix("skip=") {
                cfg.profile_skip = SkipOps::parse(ops).unwrap();
                said.push(format!("without {ops} (timing only)"));
            } else {
                panic!("unknown speed option {opt}");
            }
        }
        let model = Model::load(CudaBackend::new(cfg).unwrap(), model_dir).unwrap();
        println!(
            "{}: KV {}{}{}",
            model_dir.display(),
            dtype.name(),
            if said.is_empty() { "" } else { ", " },
            said.join(", ")
        );
        speed_of(&model, context, dtype, &batches);
    }
}

pub fn speed(model_dir: &Path, context: usize) {
    // The default (graphs, the matrix-vector kernel, our decode attention), then one
    // setting changed each.
    let base = inferd_runtime::CudaConfig::default();
    let configs = [
        base,
        inferd_runtime::CudaConfig {
            decode: inferd_runtime::DecodeAttention::FlashInfer,
            ..base
        },
        inferd_runtime::CudaConfig {
            decode: inferd_runtime::DecodeAttention::Inferd,
            ..base
        },
        inferd_runtime::CudaConfig {
            no_gemv: true,
            ..base
        },
        inferd_runtime::CudaConfig {
            no_graphs: true,
            ..base
        },
    ];
    for cfg in configs {
        let kind = format!(
            "decode passes {}, decode-sized products by {}, decode attention by {}",
            if cfg.no_graphs {
                "eager"
            } else {
                "replayed as CUDA graphs"
            },
            if cfg.no_gemv {
                "cuBLASLt"
            } else {
                "inferd's gemv at 1 row, cuBLASLt above"
            },
            match cfg.decode {
                inferd_runtime::DecodeAttention::Auto => {
                    "inferd's tensor-core build (where it takes the shape)"
                }
                inferd_runtime::DecodeAttention::Inferd => "inferd's SIMT build",
                inferd_runtime::DecodeAttention::FlashInfer => "FlashInfer's",
                inferd_runtime::DecodeAttention::TensorCores => "inferd's tensor-core build",
            }
        );
        let t0 = Instant::now();
        let model = Model::load(CudaBackend::new(cfg).unwrap(), model_dir).unwrap();
        println!(
            "{}: loaded in {:.1} s; {kind}",
            model_dir.display(),
            t0.elapsed().as_secs_f64()
        );
        speed_of(&model, context, KvDtype::Bf16, &BATCHES);
    }
}

/// The batch sizes `speed` steps at.
pub const BATCHES: [usize; 6] = [1, 2, 4, 8, 32, 64];

/// One pass run alone (the device idle before it): seconds until `forward_in` returned (the
/// host's share, if the device waits on it) and until the device finished.
pub fn timed_pass(
    model: &Model<CudaBackend>,
    ws: &mut inferd_runtime::Workspace<CudaBackend>,
    pool: &mut Pool<CudaBackend>,
    b: &ForwardBatch,
) -> (f64, f64) {
    model.backend.synchronize().unwrap();
    let t = Instant::now();
    model.forward_in(ws, &mut pool.kv, &pool.layout, b).unwrap();
    let queued = t.elapsed().as_secs_f64();
    model.backend.synchronize().unwrap();
    (queued, t.elapsed().as_secs_f64())
}

/// Each pass's seconds ([`timed_pass`]), prefilling every prompt (sequence s over
/// `tables[s]`, in state slot s) in passes of `chunk` tokens of each, the prompts' logits
/// in the last.
pub fn prefill_passes(
    model: &Model<CudaBackend>,
    ws: &mut inferd_runtime::Workspace<CudaBackend>,
    pool: &mut Pool<CudaBackend>,
    prompts: &[Vec<u32>],
    tables: &[Vec<u32>],
    chunk: usize,
) -> Vec<f64> {
    let context = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut times = Vec::new();
    for start in (0..context).step_by(chunk.max(1)) {
        let mut b = ForwardBatch::default();
        for (s, p) in prompts.iter().enumerate() {
            let end = (start + chunk).min(p.len());
            if start < end {
                b.push_in_slot(
                    &p[start..end],
                    start,
                    p.len(),
                    tables[s].clone(),
                    s as u32,
                    end == p.len(),
                );
            }
        }
        times.push(timed_pass(model, ws, pool, &b).1);
    }
    times
}

/// The median of `n` passes of `b`, each run alone ([`timed_pass`]), in seconds.
pub fn median_pass(
    model: &Model<CudaBackend>,
    ws: &mut inferd_runtime::Workspace<CudaBackend>,
    pool: &mut Pool<CudaBackend>,
    b: &ForwardBatch,
    n: usize,
) -> f64 {
    let mut t: Vec<f64> = (0..n).map(|_| timed_pass(model, ws, pool, b).1).collect();
    t.sort_by(f64::total_cmp);
    t[n / 2]
}

pub fn speed_of(model: &Model<CudaBackend>, context: usize, dtype: KvDtype, batches: &[usize]) {
    let vocab = model.cfg.vocab_size;
    let steps = 32;
    // Prefilled 8 a pass, the first pass warm-up: at least two passes.
    let max_batch = batches
        .iter()
        .max()
        .copied()
        .unwrap_or(1)
        .next_multiple_of(8)
        .max(16);
    let mut pool = Pool::new(model, max_batch * (context + steps + 1), dtype, max_batch);
    let mut ws = model.workspace(8 * context, max_batch).unwrap();
    let tables: Vec<Vec<u32>> = (0..max_batch)
        .map(|_| pool.table(context + steps + 1))
        .collect();
    let prompt = |s: usize| token_prompt(s, context, vocab);
    // Prefill every sequence, 8 per pass; the first pass is warm-up, the rest timed.
    let mut prefill_s = 0.0;
    let mut queue_s = 0.0; // until forward_in returns: the host's share, if the GPU waits on it
    let mut prefill_tokens = 0;
    for (g, group) in (0..max_batch).collect::<Vec<_>>().chunks(8).enumerate() {
        let mut b = ForwardBatch::default();
        for &s in group {
            b.push_in_slot(&prompt(s), 0, context, tables[s].clone(), s as u32, true);
        }
        let (queued, whole) = timed_pass(model, &mut ws, &mut pool, &b);
        if g > 0 {
            prefill_s += whole;
            queue_s += queued;
            prefill_tokens += b.n_tokens();
        }
    }
    let passes = (max_batch / 8 - 1) as f64;
    println!(
        "prefill: {} tokens in passes of 8 x {context}: {:.0} tok/s ({:.1} ms a pass, {:.1} ms of it queueing on the host)",
        prefill_tokens,
        prefill_tokens as f64 / prefill_s,
        prefill_s / passes * 1e3,
        queue_s / passes * 1e3
    );
    println!("| batch | step ms (forward) | step ms (with sampling) | tok/s | weights+KV(+state) bytes / step | roofline fraction |");
    println!("|---|---|---|---|---|---|");
    let mut forms = Vec::new();
    for &batch in batches {
        let before = model.backend.decode_forms();
        let mut samplers: Vec<Sampler> = (0..batch)
            .map(|_| Sampler::new(SamplingParams::greedy()))
            .collect();
        let mut next: Vec<u32> = vec![1; batch];
        let (mut fwd, mut total) = (0.0, 0.0);
        for step in 0..steps + 2 {
            let pos = context + step.min(steps);
            let mut b = ForwardBatch::default();
            for (s, &t) in next.iter().enumerate() {
                b.push_in_slot(&[t], pos, context, tables[s].clone(), s as u32, true);
            }
            model.backend.synchronize().unwrap();
            let t = Instant::now();
            model
                .forward_in(&mut ws, &mut pool.kv, &pool.layout, &b)
                .unwrap();
            model.backend.synchronize().unwrap();
            let f = t.elapsed().as_secs_f64();
            let mut rows: Vec<SampleRow<'_>> = samplers
                .iter_mut()
                .enumerate()
                .map(|(i, sampler)| SampleRow {
                    row: i,
                    sampler,
                    prompt: &[],
                    generated: &[],
                    extra: Extra::default(),
                })
                .collect();
            let mut out = Vec::new();
            model.sample(&ws, &mut rows, &mut out).unwrap();
            let all = t.elapsed().as_secs_f64();
            next = out.iter().map(|s| s.token).collect();
            if step >= 2 {
                fwd += f;
                total += all;
            }
        }
        let (fwd, total) = (fwd / steps as f64, total / steps as f64);
        let (w, kv) = step_bytes(model, batch, context, dtype);
        println!(
            "| {batch} | {:.2} | {:.2} | {:.0} | {:.1} GB | {:.0}% |",
            fwd * 1e3,
            total * 1e3,
            batch as f64 / total,
            (w + kv) / 1e9,
            100.0 * (w + kv) / BANDWIDTH / fwd
        );
        let took: Vec<String> = (model.backend.decode_forms().iter().zip(before))
            .filter(|((_, n), (_, n0))| n > n0)
            .map(|((form, n), (_, n0))| format!("{} {form:?}", n - n0))
            .collect();
        forms.push(format!("{batch}: {}", took.join(", ")));
    }
    println!("   (decode passes by form: {})", forms.join("; "));
}

/// `clusters`: how many clusters of the decode kernel's cluster form the device holds at
/// once, by split count (2..16) and warps a block (4, 8), at head_dim 128 with 4 and 8 query
/// heads a KV head and 64 with 4 (the occupancy calculator's answer, or its error).
pub fn clusters() {
    let _backend = CudaBackend::new(Default::default()).expect("a CUDA device");
    for (head_dim, group) in [(128, 4), (128, 8), (64, 4)] {
        for warps in [4, 8] {
            let row: Vec<String> = (2..=16)
                .map(
                    |s| match inferd_runtime::decode_cluster_capacity(head_dim, group, s, warps) {
                        Ok(n) => format!("{s}:{n}"),
                        Err(e) => format!("{s}:error {e}"),
                    },
                )
                .collect();
            println!(
                "head_dim {head_dim}, group {group}, {warps} warps a block: clusters of S blocks resident (S:n) {}",
                row.join(" ")
            );
        }
    }
}

/// `fibench [QUERIES] [KEYS]`: FlashInfer's SM90 causal prefill of QUERIES queries at the end
/// of KEYS keys (one sequence, the Qwen3-8B head shape: 32 query heads, 8 KV heads of 128),
/// paged as inferd's pool holds K/V (16-token pages, cp.async gathers) against contiguous
/// (the ragged kernel, TMA loads), on the same values: ms a launch and TFLOP/s of each.
pub fn fibench(queries: usize, keys: usize) {
    let (heads, kv) = (32, 8);
    let (paged, ragged, diff) =
        inferd_runtime::flashinfer_prefill_bench(queries, keys, heads, kv, 20).unwrap();
    // Causal: query i (of the last `queries`) sees keys up to keys - queries + i.
    let pairs =
        queries as f64 * (keys - queries) as f64 + queries as f64 * (queries as f64 + 1.0) / 2.0;
    let flop = 4.0 * pairs * heads as f64 * 128.0;
    println!(
        "fibench {queries} queries at the end of {keys} keys: paged {paged:.3} ms ({:.0} TFLOP/s), contiguous {ragged:.3} ms ({:.0} TFLOP/s), max |Δ| {diff:.2e}",
        flop / (paged as f64 * 1e-3) / 1e12,
        flop / (ragged as f64 * 1e-3) / 1e12,
    );
}

/// `chunks`: prompts prefilled chunk by chunk, prompt attention over paged and over
/// contiguous K/V in turn (then contiguous again: the drift), each pass timed alone.
pub fn chunks(model_dir: &Path, context: usize, sizes: &[usize], seqs: usize) {
    use inferd_runtime::{CudaConfig, PrefillKv};
    let model = Model::load(CudaBackend::new(CudaConfig::default()).unwrap(), model_dir).unwrap();
    let vocab = model.cfg.vocab_size;
    let mut pool = Pool::new(&model, seqs * context, KvDtype::Bf16, seqs);
    let tables: Vec<Vec<u32>> = (0..seqs).map(|_| pool.table(context)).collect();
    let widest = sizes.iter().copied().max().unwrap_or(1);
    let mut ws = model.workspace(seqs * widest, seqs).unwrap();
    let prompts: Vec<Vec<u32>> = (0..seqs).map(|s| token_prompt(s, context, vocab)).collect();
    let mut run = |mode: PrefillKv, chunk: usize| -> Vec<f64> {
        model.backend.set_prefill_kv(mode);
        prefill_passes(&model, &mut ws, &mut pool, &prompts, &tables, chunk)
    };
    run(PrefillKv::Contiguous, widest); // warm-up (cuBLASLt's choices, FlashInfer's plans)
    run(PrefillKv::Paged, widest);
    for &chunk in sizes {
        let contig = run(PrefillKv::Contiguous, chunk);
        let paged = run(PrefillKv::Paged, chunk);
        let again = run(PrefillKv::Contiguous, chunk);
        println!(
            "chunks: {seqs} x {context} tokens in passes of {seqs} x {chunk}: paged {:.1} ms, contiguous {:.1} ms (again {:.1}), paged / contiguous {:.3}",
            paged.iter().sum::<f64>() * 1e3,
            contig.iter().sum::<f64>() * 1e3,
            again.iter().sum::<f64>() * 1e3,
            paged.iter().sum::<f64>() / contig.iter().sum::<f64>()
        );
        println!(
            "| pass | keys at its end | paged ms | contiguous ms | again | paged / contiguous |"
        );
        println!("|---|---|---|---|---|---|");
        for (i, ((p, c), g)) in paged.iter().zip(&contig).zip(&again).enumerate() {
            println!(
                "| {i} | {} | {:.2} | {:.2} | {:.2} | {:.3} |",
                ((i + 1) * chunk).min(context),
                p * 1e3,
                c * 1e3,
                g * 1e3,
                p / c
            );
        }
    }
    model.backend.set_prefill_kv(PrefillKv::Auto);
}
