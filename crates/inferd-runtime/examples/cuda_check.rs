//! Checks and measures the CUDA backend on a GPU machine (`scripts/gpu/run.sh` runs it;
//! docs/gpu-notes.md has what it reported). Subcommands:
//!
//! - `agree MODEL [TEXT_FILE]`: the GPU against the CPU backend on the same weights:
//!   top-1 agreement and |Δlogit| over every position of a real text, the greedy
//!   continuations, and one batch of eight prompts against each prompt alone.
//! - `hf MODEL_DIR IDS_JSON LOGITS_F32`: the GPU against transformers' logits for the
//!   same ids (written by `scripts/gpu/hf_logits.py`).
//! - `speed MODEL_DIR [CONTEXT [DTYPE[:OPTION…],…]]` (options: `speed_by_dtype`): decode steps at batch 1, 2, 4, 8, 32 and 64 over CONTEXT
//!   prefilled tokens each, and one prefill pass: time per step, tokens/s, and the
//!   fraction of the bandwidth roofline (weights + the KV read, and a hybrid model's
//!   recurrent state read and written, over 4.3 TB/s); with graphs and the matrix-vector
//!   kernel, with cuBLASLt only, and eager. Hybrid models (Qwen3.5) run each sequence in
//!   its own state slot.
//! - `sampling`: the `sample` op over 1 to 64 rows of Qwen-sized random logits, per kind
//!   of draw, on the device (the default) and by the host sampler from rows read back.
//! - `profile MODEL_DIR [CONTEXT] [BATCH] [cublas|prefill [CHUNK]]`: one eager decode step
//!   inside the profiler's capture range (`ncu --profile-from-start off`); `prefill`: one
//!   pass of the last CHUNK (default 2048) tokens of BATCH CONTEXT-token prompts instead.
//! - `timeline MODEL_DIR [CONTEXT] [ROWS]`: the decode attention's stages, stamped by its
//!   blocks, in the last layer of a replayed decode step.
//! - `kernels MODEL_DIR [CONTEXT] [ROWS]`: a replayed decode step's chain launch by launch,
//!   from every block's entry, wait and done stamps (our kernels only).
//! - `fibench [QUERIES] [KEYS]`: FlashInfer's SM90 prefill over paged K/V (as the pool holds
//!   it) against contiguous K/V (its TMA kernel), same values, no model.
//! - `chunks MODEL_DIR CONTEXT CHUNK[+CHUNK…] [SEQS]`: SEQS prompts (default 1) of CONTEXT
//!   tokens prefilled in passes of CHUNK tokens of each, prompt chunks' attention over the
//!   pool's pages and over a contiguous copy (`--prefill-kv`), in turn on one model: each
//!   pass's ms both ways, and the sums.

use std::path::Path;
use std::time::Instant;

use inferd_core::sampling::{Extra, Sampler, SamplingParams};
use inferd_runtime::{
    Backend, CpuBackend, CudaBackend, ForwardBatch, KvDtype, KvLayout, Model, SampleRow,
};

const BLOCK: usize = 16;
/// Measured device-to-device copy bandwidth of the H200 (KINDS.md), bytes/s.
const BANDWIDTH: f64 = 4.3e12;

/// A KV pool and a bump allocator of its blocks; `slots` recurrent-state slots for a
/// hybrid model (sequence i of a pass runs in slot i; dense models keep none).
struct Pool<B: Backend> {
    layout: KvLayout,
    kv: B::Kv,
    next: u32,
}

impl<B: Backend> Pool<B> {
    fn new(model: &Model<B>, tokens: usize, dtype: KvDtype, slots: usize) -> Self {
        let layout = model.kv_layout_with_states(tokens.div_ceil(BLOCK) + 64, BLOCK, dtype, slots);
        let kv = model.alloc_kv(&layout).unwrap();
        Pool {
            layout,
            kv,
            next: 0,
        }
    }

    fn table(&mut self, tokens: usize) -> Vec<u32> {
        let n = tokens.div_ceil(BLOCK) as u32;
        let t = (self.next..self.next + n).collect();
        self.next += n;
        assert!(
            self.next as usize <= self.layout.num_blocks,
            "pool too small"
        );
        t
    }
}

/// Logits of every position of `ids` (prefilled in passes of `chunk`).  -> [n][vocab]
fn all_logits<B: Backend>(model: &Model<B>, ids: &[u32], chunk: usize) -> Vec<Vec<f32>> {
    let dtype = if model.backend.name() == "cuda" {
        KvDtype::Bf16
    } else {
        KvDtype::F32
    };
    let mut pool = Pool::new(model, ids.len(), dtype, 1);
    let table = pool.table(ids.len());
    let vocab = model.cfg.vocab_size;
    let mut out = Vec::new();
    for (i, c) in ids.chunks(chunk).enumerate() {
        let mut b = ForwardBatch::default();
        b.push_in_slot(c, i * chunk, ids.len(), table.clone(), 0, false);
        b.logits_rows = (0..c.len()).collect();
        let l = model.forward(&mut pool.kv, &pool.layout, &b).unwrap();
        out.extend(l.chunks(vocab).map(<[f32]>::to_vec));
    }
    out
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

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(
            0.0,
            |m: f32, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
        )
}

/// Greedy continuation of `n` tokens.
fn greedy<B: Backend>(model: &Model<B>, ids: &[u32], n: usize) -> Vec<u32> {
    let dtype = if model.backend.name() == "cuda" {
        KvDtype::Bf16
    } else {
        KvDtype::F32
    };
    let mut pool = Pool::new(model, ids.len() + n, dtype, 1);
    let table = pool.table(ids.len() + n);
    let mut b = ForwardBatch::default();
    b.push_in_slot(ids, 0, ids.len(), table.clone(), 0, true);
    let mut logits = model.forward(&mut pool.kv, &pool.layout, &b).unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let t = argmax(&logits);
        out.push(t);
        let mut b = ForwardBatch::default();
        b.push_in_slot(&[t], ids.len() + i, ids.len(), table.clone(), 0, true);
        logits = model.forward(&mut pool.kv, &pool.layout, &b).unwrap();
    }
    out
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn agree(model_path: &Path, text: Option<&Path>) {
    let gpu = Model::load(CudaBackend::new(Default::default()).unwrap(), model_path).unwrap();
    let cpu = Model::load(CpuBackend::new(), model_path).unwrap();
    let g = gpu.gguf.as_ref().expect("agree takes a GGUF model");
    let tok = inferd_text::Tokenizer::from_gguf(g).unwrap();
    let text = match text {
        Some(p) => std::fs::read_to_string(p).unwrap(),
        None => include_str!("../../../README.md").to_string(),
    };
    let mut ids = tok.encode(&text, false).unwrap();
    ids.truncate(512);
    let t0 = Instant::now();
    let lg = all_logits(&gpu, &ids, 128);
    let tg = t0.elapsed();
    let t0 = Instant::now();
    let lc = all_logits(&cpu, &ids, 128);
    let tc = t0.elapsed();
    let mut same = 0;
    let (mut worst, mut sum) = (0f32, 0f64);
    for (a, b) in lg.iter().zip(&lc) {
        same += (argmax(a) == argmax(b)) as usize;
        let d = max_abs(a, b);
        worst = worst.max(d);
        sum += d as f64;
    }
    println!(
        "agree {}: {} positions: top-1 GPU = CPU at {same} ({:.1}%), max |Δlogit| {worst:.4}, mean of per-position max {:.4} (GPU {:.2} s, CPU {:.2} s)",
        model_path.display(),
        ids.len(),
        100.0 * same as f64 / ids.len() as f64,
        sum / ids.len() as f64,
        tg.as_secs_f64(),
        tc.as_secs_f64()
    );
    for start in [32, 96, 200] {
        let p = &ids[..start];
        let (a, b) = (greedy(&gpu, p, 64), greedy(&cpu, p, 64));
        println!(
            "greedy from {start} tokens: GPU and CPU agree on the first {} of 64 tokens\n  GPU: {:?}\n  CPU: {:?}",
            common_prefix(&a, &b),
            tok.decode(&a, false).unwrap_or_default(),
            tok.decode(&b, false).unwrap_or_default()
        );
    }
    batched_vs_alone(&gpu, &ids);
}

/// Eight prompts of different lengths in one pass (all rows' logits) against each alone.
fn batched_vs_alone<B: Backend>(model: &Model<B>, ids: &[u32]) {
    let lens = [17, 40, 64, 90, 128, 150, 200, 255];
    let alone: Vec<Vec<Vec<f32>>> = lens
        .iter()
        .map(|&n| all_logits(model, &ids[..n], n))
        .collect();
    let mut pool = Pool::new(model, lens.iter().sum(), KvDtype::Bf16, lens.len());
    let mut b = ForwardBatch::default();
    for (i, &n) in lens.iter().enumerate() {
        let t = pool.table(n);
        b.push_in_slot(&ids[..n], 0, n, t, i as u32, false);
    }
    b.logits_rows = (0..b.tokens.len()).collect();
    let all = model.forward(&mut pool.kv, &pool.layout, &b).unwrap();
    let vocab = model.cfg.vocab_size;
    let (mut rows, mut same, mut worst) = (0, 0, 0f32);
    for one in &alone {
        for want in one {
            let r = &all[rows * vocab..(rows + 1) * vocab];
            same += (argmax(r) == argmax(want)) as usize;
            worst = worst.max(max_abs(r, want));
            rows += 1;
        }
    }
    println!(
        "batched (8 prompts, {rows} rows) vs alone: top-1 equal at {same} of {rows}, max |Δlogit| {worst:.4}"
    );
}

fn hf(model_dir: &Path, ids_json: &Path, logits_bin: &Path) {
    let gpu = Model::load(CudaBackend::new(Default::default()).unwrap(), model_dir).unwrap();
    let ids: Vec<u32> = serde_json::from_str(&std::fs::read_to_string(ids_json).unwrap()).unwrap();
    let raw = std::fs::read(logits_bin).unwrap();
    let want: Vec<f32> = raw
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let vocab = gpu.cfg.vocab_size;
    assert_eq!(want.len(), ids.len() * vocab, "reference shape");
    let got = all_logits(&gpu, &ids, ids.len());
    let (mut same, mut worst, mut num, mut den) = (0, 0f32, 0f64, 0f64);
    for (i, row) in got.iter().enumerate() {
        let w = &want[i * vocab..(i + 1) * vocab];
        same += (argmax(row) == argmax(w)) as usize;
        worst = worst.max(max_abs(row, w));
        for (a, b) in row.iter().zip(w) {
            num += ((a - b) as f64).powi(2);
            den += (*b as f64).powi(2);
        }
    }
    println!(
        "hf {}: {} positions: top-1 equal at {same}, max |Δlogit| {worst:.4}, ‖Δ‖/‖ref‖ {:.2e}",
        model_dir.display(),
        ids.len(),
        (num / den).sqrt()
    );
}

/// Bytes a decode step must move: every weight matrix but the input embedding, and the
/// state: the KV read (scales included), and a hybrid model's recurrent state read and
/// written per sequence.
fn step_bytes<B: Backend>(
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
/// - `splits=N`: decode attention in N splits at every row count;
/// - `paged` / `contig`: prompt chunks' attention over the pool's pages / a contiguous copy
///   (default: by the policy);
/// - `rows=N+N…`: only these batch sizes (and only as many sequences prefilled);
/// - `skip=OP+OP…`: ops left out of every pass (profiling: what each costs in a graph;
///   the names of `SkipOps::parse`).
fn speed_by_dtype(model_dir: &Path, context: usize, specs: &str) {
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

fn speed(model_dir: &Path, context: usize) {
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

/// One eager decode step of `batch` sequences over `context` tokens each inside the
/// profiler's capture range (for `ncu --profile-from-start off`), after two warm-up steps;
/// with `prefill: Some(chunk)`, instead one pass of the last `chunk` tokens of `batch`
/// `context`-token prompts (their earlier tokens prefilled before, one sequence a pass),
/// after a warm-up pass of the same shape on other slots. `chunk == context` is the
/// prefill pass that `speed` times.
fn profile(model_dir: &Path, context: usize, batch: usize, no_gemv: bool, prefill: Option<usize>) {
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
    let ids = |s: usize| -> Vec<u32> {
        (0..context)
            .map(|i| ((i * 7919 + s * 104729) % vocab) as u32)
            .collect()
    };
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
struct DecodeRig {
    model: Model<CudaBackend>,
    pool: Pool<CudaBackend>,
    ws: inferd_runtime::Workspace<CudaBackend>,
    tables: Vec<Vec<u32>>,
    context: usize,
}

impl DecodeRig {
    fn new(model_dir: &Path, context: usize, rows: usize, steps: usize) -> Self {
        let model = Model::load(CudaBackend::new(Default::default()).unwrap(), model_dir).unwrap();
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
            let ids: Vec<u32> = (0..context)
                .map(|i| ((i * 7919 + s * 104729) % vocab) as u32)
                .collect();
            let mut b = ForwardBatch::default();
            b.push_in_slot(&ids, 0, context, rig.tables[s].clone(), s as u32, true);
            rig.run(&b);
        }
        rig
    }

    fn run(&mut self, b: &ForwardBatch) {
        let layout = &self.pool.layout;
        self.model
            .forward_in(&mut self.ws, &mut self.pool.kv, layout, b)
            .unwrap();
        self.model.backend.synchronize().unwrap();
    }

    /// Decode step `step` (0, 1, …) of every sequence; ms on the wall.
    fn step(&mut self, step: usize) -> f64 {
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
fn timeline(model_dir: &Path, context: usize, rows: usize) {
    use inferd_runtime::{PROBE_STAGES, PROBE_STAGE_NAMES};
    let steps = 6;
    let mut rig = DecodeRig::new(model_dir, context, rows, steps);
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
            // Stage 7 is stamped by a (row, KV head)'s last block only: older stamps in the
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
fn kernels(model_dir: &Path, context: usize, rows: usize) {
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

/// The batch sizes `speed` steps at.
const BATCHES: [usize; 6] = [1, 2, 4, 8, 32, 64];

/// One pass run alone (the device idle before it): seconds until `forward_in` returned (the
/// host's share, if the device waits on it) and until the device finished.
fn timed_pass(
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

fn speed_of(model: &Model<CudaBackend>, context: usize, dtype: KvDtype, batches: &[usize]) {
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
    let prompt = |s: usize| -> Vec<u32> {
        (0..context)
            .map(|i| ((i * 7919 + s * 104729) % vocab) as u32)
            .collect()
    };
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
    for &batch in batches {
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
    }
}

/// Time of one `sample` call per kind of draw and row count, device against host.
fn sampling() {
    let vocab = 151_936;
    let max_rows = 64;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let host: Vec<f32> = (0..max_rows * vocab)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 24.0 - 16.0
        })
        .collect();
    let kinds: [(&str, fn(&mut SamplingParams)); 5] = [
        ("greedy", |p| p.temperature = 0.0),
        ("temperature 0.8", |_| {}),
        ("temperature 0.8, top-p 0.95", |p| p.top_p = 0.95),
        ("temperature 0.8, top-k 40, min-p 0.05", |p| {
            p.top_k = 40;
            p.min_p = 0.05
        }),
        ("greedy, 5 logprobs, repetition 1.1", |p| {
            p.temperature = 0.0;
            p.logprobs = Some(5);
            p.repetition_penalty = 1.1;
        }),
    ];
    let history: Vec<u32> = (0..2000).map(|i| (i * 7919 % vocab) as u32).collect();
    println!("| draw | rows | device ms | host ms (rows read back) | host / device |");
    println!("|---|---|---|---|---|");
    let device = CudaBackend::new(inferd_runtime::CudaConfig::default()).unwrap();
    let on_host = CudaBackend::new(inferd_runtime::CudaConfig {
        host_sampling: true,
        ..Default::default()
    })
    .unwrap();
    let mut logits = [
        device.alloc(max_rows * vocab).unwrap(),
        on_host.alloc(max_rows * vocab).unwrap(),
    ];
    device
        .from_host(&host, max_rows, vocab, &mut logits[0])
        .unwrap();
    on_host
        .from_host(&host, max_rows, vocab, &mut logits[1])
        .unwrap();
    for (name, set) in kinds {
        for rows in [1usize, 8, 32, 64] {
            let mut ms = [0.0; 2];
            for (k, be) in [&device, &on_host].into_iter().enumerate() {
                let mut samplers: Vec<Sampler> = (0..rows)
                    .map(|i| {
                        let mut p = SamplingParams {
                            temperature: 0.8,
                            seed: Some(i as u64),
                            ..Default::default()
                        };
                        set(&mut p);
                        Sampler::new(p)
                    })
                    .collect();
                let iters = 20;
                let mut total = 0.0;
                for it in 0..iters + 2 {
                    let mut rs: Vec<SampleRow<'_>> = samplers
                        .iter_mut()
                        .enumerate()
                        .map(|(i, sampler)| SampleRow {
                            row: i,
                            sampler,
                            prompt: &history,
                            generated: &history[..64],
                            extra: Extra::default(),
                        })
                        .collect();
                    let t = Instant::now();
                    be.sample(&logits[k], &mut rs, &mut Vec::new()).unwrap();
                    if it >= 2 {
                        total += t.elapsed().as_secs_f64();
                    }
                }
                ms[k] = 1e3 * total / iters as f64;
            }
            println!(
                "| {name} | {rows} | {:.3} | {:.3} | {:.1}x |",
                ms[0],
                ms[1],
                ms[1] / ms[0]
            );
        }
    }
}

/// `fibench [QUERIES] [KEYS]`: FlashInfer's SM90 causal prefill of QUERIES queries at the end
/// of KEYS keys (one sequence, the Qwen3-8B head shape: 32 query heads, 8 KV heads of 128),
/// paged as inferd's pool holds K/V (16-token pages, cp.async gathers) against contiguous
/// (the ragged kernel, TMA loads), on the same values: ms a launch and TFLOP/s of each.
fn fibench(queries: usize, keys: usize) {
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
fn chunks(model_dir: &Path, context: usize, sizes: &[usize], seqs: usize) {
    use inferd_runtime::{CudaConfig, PrefillKv};
    let model = Model::load(CudaBackend::new(CudaConfig::default()).unwrap(), model_dir).unwrap();
    let vocab = model.cfg.vocab_size;
    let mut pool = Pool::new(&model, seqs * context, KvDtype::Bf16, seqs);
    let tables: Vec<Vec<u32>> = (0..seqs).map(|_| pool.table(context)).collect();
    let widest = sizes.iter().copied().max().unwrap_or(1);
    let mut ws = model.workspace(seqs * widest, seqs).unwrap();
    let prompts: Vec<Vec<u32>> = (0..seqs)
        .map(|s| {
            (0..context)
                .map(|i| ((i * 7919 + s * 104729) % vocab) as u32)
                .collect()
        })
        .collect();
    // Each pass's seconds, prefilling every prompt in passes of `chunk` tokens of each.
    let mut run = |mode: PrefillKv, chunk: usize| -> Vec<f64> {
        model.backend.set_prefill_kv(mode);
        let mut times = Vec::new();
        for start in (0..context).step_by(chunk) {
            let end = (start + chunk).min(context);
            let mut b = ForwardBatch::default();
            for (s, p) in prompts.iter().enumerate() {
                let last = end == context;
                b.push_in_slot(
                    &p[start..end],
                    start,
                    context,
                    tables[s].clone(),
                    s as u32,
                    last,
                );
            }
            times.push(timed_pass(&model, &mut ws, &mut pool, &b).1);
        }
        times
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

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let p = |i: usize| a.get(i).map(Path::new);
    match a.get(1).map(String::as_str) {
        Some("agree") => agree(p(2).expect("MODEL"), p(3)),
        Some("hf") => hf(p(2).expect("MODEL_DIR"), p(3).expect("IDS_JSON"), p(4).expect("LOGITS")),
        Some("speed") => {
            let dir = p(2).expect("MODEL_DIR");
            let context = a.get(3).map_or(512, |c| c.parse().expect("CONTEXT"));
            match a.get(4) {
                Some(dtypes) => speed_by_dtype(dir, context, dtypes),
                None => speed(dir, context),
            }
        }
        Some("sampling") => sampling(),
        Some("profile") => profile(
            p(2).expect("MODEL_DIR"),
            a.get(3).map_or(512, |c| c.parse().expect("CONTEXT")),
            a.get(4).map_or(1, |c| c.parse().expect("BATCH")),
            a.get(5).is_some_and(|c| c == "cublas"),
            a.get(5).filter(|c| *c == "prefill").map(|_| {
                a.get(6).map_or(2048, |c| c.parse().expect("CHUNK"))
            }),
        ),
        Some("timeline") => timeline(
            p(2).expect("MODEL_DIR"),
            a.get(3).map_or(4096, |c| c.parse().expect("CONTEXT")),
            a.get(4).map_or(1, |c| c.parse().expect("ROWS")),
        ),
        Some("kernels") => kernels(
            p(2).expect("MODEL_DIR"),
            a.get(3).map_or(4096, |c| c.parse().expect("CONTEXT")),
            a.get(4).map_or(1, |c| c.parse().expect("ROWS")),
        ),
        Some("fibench") => fibench(
            a.get(2).map_or(2048, |c| c.parse().expect("QUERIES")),
            a.get(3).map_or(16384, |c| c.parse().expect("KEYS")),
        ),
        Some("chunks") => chunks(
            p(2).expect("MODEL_DIR"),
            a.get(3).map_or(16384, |c| c.parse().expect("CONTEXT")),
            &a.get(4).map_or("2048".to_string(), String::clone).split('+').map(|c| c.parse().expect("CHUNK+CHUNK")).collect::<Vec<usize>>(),
            a.get(5).map_or(1, |c| c.parse().expect("SEQS")),
        ),
        _ => eprintln!("usage: cuda_check agree MODEL [TEXT] | fibench [QUERIES] [KEYS] | chunks MODEL_DIR CONTEXT CHUNK[+CHUNK…] [SEQS] | hf MODEL_DIR IDS_JSON LOGITS_F32 | speed MODEL_DIR [CONTEXT] | sampling | profile MODEL_DIR [CONTEXT] [BATCH] [cublas|prefill [CHUNK]] | timeline MODEL_DIR [CONTEXT] [ROWS] | kernels MODEL_DIR [CONTEXT] [ROWS]"),
    }
}
