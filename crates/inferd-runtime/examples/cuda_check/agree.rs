//! `agree` and `hf`: the GPU against the CPU backend and against transformers.

use std::path::Path;
use std::time::Instant;

use inferd_runtime::{Backend, CpuBackend, CudaBackend, ForwardBatch, KvDtype, Model};

use super::common::*;

pub fn agree(model_path: &Path, text: Option<&Path>) {
    let gpu = Model::load(CudaBackend::new(Default::default()).unwrap(), model_path).unwrap();
    let cpu = Model::load(CpuBackend::new(), model_path).unwrap();
    let g = gpu.gguf.as_ref().expect("agree takes a GGUF model");
    let tok = inferd_text::Tokenizer::from_gguf(g).unwrap();
    let text = match text {
        Some(p) => std::fs::read_to_string(p).unwrap(),
        None => include_str!("../../../../README.md").to_string(),
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
pub fn batched_vs_alone<B: Backend>(model: &Model<B>, ids: &[u32]) {
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

pub fn hf(model_dir: &Path, ids_json: &Path, logits_bin: &Path) {
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
