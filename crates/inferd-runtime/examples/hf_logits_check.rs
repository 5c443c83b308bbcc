//! Checks model folders made by `scripts/fixtures/make_*_models.py` (config.json,
//! model.safetensors, reference.json) against their transformers reference on the CPU:
//! the max |Δlogit| of a full prefill and of prefill in pieces of 1, 3, 7 and 64 tokens
//! (and of the pieces against the full prefill), and whether the greedy continuation
//! agrees up to the first near-tie.
//!
//!     cargo run --release -p inferd-runtime --example hf_logits_check -- DIR...
//!
//! With `--random N` the hybrid script writes N random configs to check this way.

use inferd_core::kv::KvManager;
use inferd_runtime::{CpuBackend, ForwardBatch, KvDtype, Model};
use serde_json::Value;

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_u64)
                .map(|x| x as u32)
                .collect()
        })
        .unwrap_or_default()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut failed = 0;
    for dir in std::env::args().skip(1) {
        let dir = std::path::PathBuf::from(dir);
        let r: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json"))?)?;
        let model = match Model::load(CpuBackend::new(), &dir) {
            Ok(m) => m,
            Err(e) => {
                println!("{}: load failed: {e}", dir.display());
                failed += 1;
                continue;
            }
        };
        let vocab = model.cfg.vocab_size;
        let layout = model.kv_layout_with_states(512, 16, KvDtype::F32, 4);
        let mut kv = model.alloc_kv(&layout)?;
        let mut worst = 0.0f32;
        let mut pieces_vs_whole = 0.0f32;
        let mut greedy_ok = true;
        for p in r["prompts"].as_array().ok_or("no prompts")? {
            let input = ids(&p["input_ids"]);
            let want: Vec<Vec<f32>> = p["logits"]
                .as_array()
                .ok_or("no logits")?
                .iter()
                .map(|row| {
                    row.as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_f64)
                                .map(|x| x as f32)
                                .collect()
                        })
                        .unwrap_or_default()
                })
                .collect();
            let mut whole: Vec<Vec<f32>> = Vec::new();
            for piece in [input.len(), 1, 3, 7, 64] {
                let mut kvm = KvManager::new(layout.num_blocks, layout.block_size);
                let table = kvm
                    .allocate_slots(1, input.len() + 64)
                    .ok_or("pool")?
                    .to_vec();
                let mut row = 0;
                for (i, c) in input.chunks(piece).enumerate() {
                    let mut b = ForwardBatch::default();
                    b.push_in_slot(c, i * piece, input.len(), table.clone(), 0, false);
                    b.logits_rows = (0..c.len()).collect();
                    let l = model.forward(&mut kv, &layout, &b)?;
                    for got in l.chunks(vocab) {
                        if piece == input.len() {
                            whole.push(got.to_vec());
                        } else {
                            let d = got
                                .iter()
                                .zip(&whole[row])
                                .map(|(a, b)| (a - b).abs())
                                .fold(0.0, f32::max);
                            pieces_vs_whole = pieces_vs_whole.max(d);
                        }
                        let d = got
                            .iter()
                            .zip(&want[row])
                            .map(|(a, b)| (a - b).abs())
                            .fold(0.0, f32::max);
                        worst = worst.max(d);
                        row += 1;
                    }
                }
            }
            // Greedy: prefill, then one token per pass.
            let gold = ids(&p["greedy"]);
            let margins: Vec<f64> = p["greedy_margin"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default();
            let mut kvm = KvManager::new(layout.num_blocks, layout.block_size);
            let table = kvm
                .allocate_slots(1, input.len() + gold.len())
                .ok_or("pool")?
                .to_vec();
            let mut b = ForwardBatch::default();
            b.push_in_slot(&input, 0, input.len(), table.clone(), 0, true);
            let mut logits = model.forward(&mut kv, &layout, &b)?;
            for (i, &g) in gold.iter().enumerate() {
                let top = (0..vocab)
                    .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                    .unwrap_or(0) as u32;
                if top != g {
                    greedy_ok &= margins.get(i).is_some_and(|&m| m < 4e-3);
                    break;
                }
                let mut b = ForwardBatch::default();
                b.push_in_slot(&[g], input.len() + i, input.len(), table.clone(), 0, true);
                logits = model.forward(&mut kv, &layout, &b)?;
            }
        }
        let ok = worst <= 2e-3 && greedy_ok;
        failed += usize::from(!ok);
        println!(
            "{}: {} max |Δlogit| {worst:.2e} (pieces vs one pass {pieces_vs_whole:.2e}), greedy {}",
            dir.display(),
            if ok { "ok" } else { "FAILED" },
            if greedy_ok { "agrees" } else { "differs" }
        );
    }
    if failed > 0 {
        return Err(format!("{failed} model(s) failed").into());
    }
    Ok(())
}
