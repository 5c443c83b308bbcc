//! Tiny random Qwen3.5 hybrid models (Gated DeltaNet + gated attention) against the
//! logits and greedy continuations transformers computed for them (`fixtures/models/`,
//! made by `scripts/fixtures/make_hybrid_models.py`), and the recurrent-state slots:
//! chunked prefill at any piece size, resume from a snapshot slot, export → import of
//! a slot (with its KV blocks, into a fresh pool), and a batch of 16 mixed prefill and
//! decode sequences against each alone.
//!
//! Tolerances as in `hf_reference.rs` ([`common::profile`]): logits within 2e-3 of the
//! float32 reference on the CPU. CUDA rounds weights and matrix-product inputs to bf16,
//! which alone moves these chaotic models' logits by up to 2, so CUDA is checked (within
//! 0.25) against the CPU at the same precision ([`cuda_reference`]) instead; a sequence in a
//! batch or prefilled in pieces within the backend's batch tolerance of itself alone or in
//! one piece. Every body runs on both backends; with `cuda`, a slot's image also moves
//! between them (exported on one, finished on the other).

mod common;

use common::*;
use inferd_runtime::{Backend, CpuBackend, CpuConfig, ForwardBatch, Model};
use serde_json::Value;

const MODELS: [&str; 2] = ["qwen35_hybrid", "qwen35_hybrid_nested"];

fn model_dir(name: &str) -> std::path::PathBuf {
    repo_root().join("fixtures/models").join(name)
}

fn reference(name: &str) -> Value {
    let p = model_dir(name).join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// What `backend` is checked against: transformers' float32 logits, or on CUDA the CPU's
/// at the GPU's precision ([`cuda_reference`]).
fn reference_for<B: Backend>(backend: &B, name: &str) -> Value {
    if backend.name() == "cuda" {
        cuda_reference(name)
    } else {
        reference(name)
    }
}

/// The CPU backend rounding where the CUDA backend rounds (its matrix products' inputs).
fn cpu_like_cuda() -> CpuBackend {
    CpuBackend::with_config(CpuConfig {
        bf16_like_cuda: true,
        ..Default::default()
    })
}

/// The fixture's copy with every matrix (rank-2 tensor: projections, embeddings) rounded to
/// bf16, as the CUDA backend loads it; vectors (norms, gates, conv kernels) as they are.
fn bf16_copy(name: &str) -> std::path::PathBuf {
    let src = model_dir(name);
    let dir = std::env::temp_dir().join(format!("inferd-{name}-bf16-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let mut bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    for (key, t) in header.as_object().unwrap() {
        if key == "__metadata__" || t["dtype"] != "F32" || t["shape"].as_array().unwrap().len() != 2
        {
            continue;
        }
        let off = ids(&t["data_offsets"]);
        let data = &mut bytes[8 + n + off[0] as usize..8 + n + off[1] as usize];
        for v in data.chunks_exact_mut(4) {
            let b = u32::from_le_bytes(v.try_into().unwrap());
            let r = (b + 0x7fff + ((b >> 16) & 1)) & 0xffff_0000; // ties to even
            v.copy_from_slice(&r.to_le_bytes());
        }
    }
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
    dir
}

/// The reference for the CUDA backend: the fixture's prompts through the CPU at the GPU's
/// precision (bf16 weights, bf16 matrix-product inputs), in the fixture reference's form
/// (logits, margins, top-1, greedy continuation and its margins). These tiny random models
/// are chaotic enough (initializer range 0.2) that bf16 rounding alone moves their logits by
/// up to 2 from transformers' float32 ones; the GPU agrees with this to rounding order.
fn cuda_reference(name: &str) -> Value {
    static CACHE: std::sync::Mutex<Vec<(String, Value)>> = std::sync::Mutex::new(Vec::new());
    if let Some((_, v)) = CACHE.lock().unwrap().iter().find(|(n, _)| n == name) {
        return v.clone();
    }
    let dir = bf16_copy(name);
    let model = Model::load(cpu_like_cuda(), &dir).unwrap();
    let mut run = Runner::new(&model, 512);
    let margin = |row: &[f32]| {
        let top = argmax(row) as usize;
        let second = (0..row.len())
            .filter(|&i| i != top)
            .map(|i| row[i])
            .fold(f32::NEG_INFINITY, f32::max);
        row[top] - second
    };
    let mut out = reference(name);
    for p in out["prompts"].as_array_mut().unwrap() {
        let input = ids(&p["input_ids"]);
        let logits = run.prompt_logits(&input, input.len());
        let n_greedy = ids(&p["greedy"]).len();
        let (mut seq, mut greedy, mut greedy_margin) = (input.clone(), Vec::new(), Vec::new());
        for _ in 0..n_greedy {
            let last = run.prompt_logits(&seq, seq.len()).pop().unwrap();
            let t = argmax(&last);
            greedy.push(t);
            greedy_margin.push(margin(&last));
            seq.push(t);
        }
        p["top1"] = serde_json::json!(logits.iter().map(|r| argmax(r)).collect::<Vec<_>>());
        p["margin"] = serde_json::json!(logits.iter().map(|r| margin(r)).collect::<Vec<_>>());
        p["logits"] = serde_json::json!(logits);
        p["greedy"] = serde_json::json!(greedy);
        p["greedy_margin"] = serde_json::json!(greedy_margin);
    }
    std::fs::remove_dir_all(&dir).ok();
    CACHE.lock().unwrap().push((name.to_string(), out.clone()));
    out
}

fn prompts(r: &Value) -> Vec<&Value> {
    r["prompts"].as_array().unwrap().iter().collect()
}

fn longest(r: &Value) -> Vec<u32> {
    prompts(r)
        .iter()
        .map(|p| ids(&p["input_ids"]))
        .max_by_key(|p| p.len())
        .unwrap()
}

/// max |Δ| between each position's logits and the reference's, and top-1 where the
/// reference is not a near-tie.
fn check_logits(name: &str, what: &str, got: &[Vec<f32>], p: &Value, tol: f32) -> f32 {
    let want = p["logits"].as_array().unwrap();
    assert_eq!(got.len(), want.len());
    let (margins, top1) = (floats(&p["margin"]), ids(&p["top1"]));
    let mut worst = 0.0f32;
    for (i, (row, w)) in got.iter().zip(want).enumerate() {
        let d = max_abs_diff(row, &floats(w));
        assert!(
            d <= tol,
            "{name} {what}: position {i}: max |Δlogit| {d} > {tol}"
        );
        if margins[i] > 2.0 * tol {
            assert_eq!(argmax(row), top1[i], "{name} {what}: top-1 at position {i}");
        }
        worst = worst.max(d);
    }
    worst
}

/// Full prefill of every prompt within tolerance of transformers, and the greedy
/// continuation (prefill, then recurrent decode steps) equal to transformers'.
fn matches_transformers<B: Backend>(backend: B, name: &str) {
    let tol = profile(&backend).logit_tol;
    let r = reference_for(&backend, name);
    let model = Model::load(backend, &model_dir(name)).unwrap();
    assert!(model.cfg.state_layer_count() > 0 && model.cfg.kv_layer_count() > 0);
    let mut run = Runner::new(&model, 512);
    for p in prompts(&r) {
        let input = ids(&p["input_ids"]);
        let logits = run.prompt_logits(&input, input.len());
        let worst = check_logits(name, p["name"].as_str().unwrap(), &logits, p, tol);
        eprintln!(
            "{name} {}: full prefill max |Δlogit| {worst:.2e}",
            p["name"]
        );
        let got = run.greedy(&input, ids(&p["greedy"]).len());
        assert_greedy_matches(&got, p, tol, name);
    }
}

/// Prefill in pieces of several sizes (most not dividing the 64-token chunks of the
/// delta rule) equals the reference and one whole pass.
fn chunked_prefill<B: Backend>(backend: B, name: &str) {
    let prof = profile(&backend);
    let r = reference_for(&backend, name);
    let model = Model::load(backend, &model_dir(name)).unwrap();
    let p = prompts(&r)
        .into_iter()
        .max_by_key(|p| p["input_ids"].as_array().unwrap().len())
        .unwrap();
    let input = ids(&p["input_ids"]);
    let mut run = Runner::new(&model, 512);
    let whole = run.prompt_logits(&input, input.len());
    for chunk in [1, 5, 16, 37, 64, 100] {
        let parts = run.prompt_logits(&input, chunk);
        let worst = check_logits(name, &format!("chunk {chunk}"), &parts, p, prof.logit_tol);
        let mut self_diff = 0.0f32;
        for (i, (a, b)) in whole.iter().zip(&parts).enumerate() {
            let d = max_abs_diff(a, b);
            assert!(
                d <= prof.batch_tol,
                "{name}: chunk {chunk}, position {i}: {d} from one pass"
            );
            self_diff = self_diff.max(d);
        }
        eprintln!(
            "{name} chunk {chunk}: max |Δlogit| {worst:.2e} vs transformers, {self_diff:.2e} vs one pass"
        );
    }
}

/// Logits of `tokens` at `start` in `slot` over `table` (every row).
fn run_piece<B: Backend>(
    run: &mut Runner<'_, B>,
    tokens: &[u32],
    start: usize,
    prompt_len: usize,
    table: &[u32],
    slot: u32,
) -> Vec<Vec<f32>> {
    let mut b = ForwardBatch::default();
    b.push_in_slot(tokens, start, prompt_len, table.to_vec(), slot, false);
    b.logits_rows = (0..tokens.len()).collect();
    let vocab = run.model.cfg.vocab_size;
    let l = run.model.forward(&mut run.kv, &run.layout, &b).unwrap();
    l.chunks(vocab).map(<[f32]>::to_vec).collect()
}

/// Prefill up to `k`, snapshot the slot, run unrelated tokens in it, restore the
/// snapshot and finish: the same logits as one pass (the same bits when `k` is on a
/// 64-token chunk boundary, on a backend whose rows do not follow the pass's shape).
fn resume_from_snapshot<B: Backend>(backend: B, name: &str) {
    let prof = profile(&backend);
    let tol = prof.batch_tol;
    let r = reference_for(&backend, name);
    let model = Model::load(backend, &model_dir(name)).unwrap();
    let input = longest(&r);
    let mut run = Runner::new(&model, 512);
    let whole = run.prompt_logits(&input, input.len());
    let n = input.len();
    for k in [64, 70, 128, 1] {
        let (seq, table) = run.new_seq(n + 8);
        let (slot, snap) = (Runner::<B>::slot(seq), Runner::<B>::slot(seq + 1));
        run_piece(&mut run, &input[..k], 0, n, &table, slot);
        model
            .copy_state_slots(&mut run.kv, &[(slot, snap)])
            .unwrap();
        // Unrelated work in the running slot (and over the KV positions after k).
        let noise: Vec<u32> = (0..8).map(|i| (i * 31 + 7) % 200 + 3).collect();
        run_piece(&mut run, &noise, k, n, &table, slot);
        model
            .copy_state_slots(&mut run.kv, &[(snap, slot)])
            .unwrap();
        let rest = run_piece(&mut run, &input[k..], k, n, &table, slot);
        let mut worst = 0.0f32;
        for (i, row) in rest.iter().enumerate() {
            let d = max_abs_diff(row, &whole[k + i]);
            assert!(d <= tol, "{name}: resumed at {k}, position {}: {d}", k + i);
            if prof.shape_exact && k % 64 == 0 {
                assert_eq!(
                    row,
                    &whole[k + i],
                    "{name}: resumed at {k}: not the same bits"
                );
            }
            worst = worst.max(d);
        }
        eprintln!("{name}: resumed from a snapshot at {k}: max |Δlogit| {worst:.2e} vs one pass");
        run.kvm.free(seq);
    }
}

/// Export a sequence's state slot and KV blocks after `k` tokens, import them into a
/// fresh pool (new block ids, another slot) and finish there: the same bits as finishing
/// in the first pool, within tolerance of one pass, and the slot's image reads back
/// unchanged.
fn export_import_slot<B: Backend>(backend: B, name: &str) {
    let tol = profile(&backend).batch_tol;
    let r = reference_for(&backend, name);
    let model = Model::load(backend, &model_dir(name)).unwrap();
    let input = longest(&r);
    let n = input.len();
    let k = 96; // inside a 64-token chunk
    let mut a = Runner::new(&model, 512);
    let whole = a.prompt_logits(&input, n);
    let (seq, table) = a.new_seq(n);
    let slot = Runner::<B>::slot(seq);
    run_piece(&mut a, &input[..k], 0, n, &table, slot);
    let slot_bytes = a.layout.state.slot_bytes();
    assert!(slot_bytes > 0);
    let mut state = vec![0u8; slot_bytes];
    model
        .export_state_slots(&a.kv, &[slot], &mut state)
        .unwrap();
    let used = k.div_ceil(a.layout.block_size);
    let mut blocks = vec![0u8; used * a.layout.block_bytes()];
    model
        .backend
        .export_blocks(&a.kv, &table[..used], &mut blocks)
        .unwrap();

    let mut b = Runner::new(&model, 512);
    b.new_seq(40); // shift block ids and slots
    let (seq_b, table_b) = b.new_seq(n);
    let slot_b = Runner::<B>::slot(seq_b);
    assert_ne!((slot_b, table_b[0]), (slot, table[0]));
    model
        .import_state_slots(&mut b.kv, &[slot_b], &state)
        .unwrap();
    model
        .backend
        .import_blocks(&mut b.kv, &table_b[..used], &blocks)
        .unwrap();
    let mut again = vec![0u8; slot_bytes];
    model
        .export_state_slots(&b.kv, &[slot_b], &mut again)
        .unwrap();
    assert_eq!(again, state, "{name}: the imported slot's image differs");
    let rest = run_piece(&mut b, &input[k..], k, n, &table_b, slot_b);
    let rest_a = run_piece(&mut a, &input[k..], k, n, &table, slot);
    assert_eq!(
        rest, rest_a,
        "{name}: finished after import differs from finished in place"
    );
    for (i, row) in rest.iter().enumerate() {
        let d = max_abs_diff(row, &whole[k + i]);
        assert!(d <= tol, "{name}: imported at {k}, position {}: {d}", k + i);
    }
    // Wrong sizes and slots are errors that write nothing.
    assert!(model
        .import_state_slots(&mut b.kv, &[slot_b], &state[1..])
        .is_err());
    let past = b.layout.state.slots as u32;
    assert!(model
        .import_state_slots(&mut b.kv, &[past], &state)
        .is_err());
    assert!(model.copy_state_slots(&mut b.kv, &[(0, past)]).is_err());
}

/// 16 sequences, each prefilled alone to a different length, then one pass with half of
/// them decoding a token and half prefilling their next piece: every logits row equals
/// the same chunk run alone from the same state.
fn batch_of_16_equals_each_alone<B: Backend>(backend: B, name: &str) {
    let tol = profile(&backend).batch_tol;
    let r = reference_for(&backend, name);
    let model = Model::load(backend, &model_dir(name)).unwrap();
    let base = longest(&r);
    let mut run = Runner::new(&model, 16 * 160);
    struct Seq {
        tokens: Vec<u32>,
        table: Vec<u32>,
        slot: u32,
        done: usize,
        prompt_len: usize,
        next: Vec<u32>,
    }
    let mut seqs = Vec::new();
    for i in 0..16usize {
        let len = 5 + i * 9; // 5..140: inside and across 64-token chunks
        let tokens: Vec<u32> = (0..len).map(|j| base[(i * 7 + j) % base.len()]).collect();
        let (seq, table) = run.new_seq(len + 80);
        let slot = Runner::<B>::slot(seq);
        let decode = i % 2 == 0;
        let done = if decode { len } else { len / 2 };
        run_piece(&mut run, &tokens[..done], 0, len, &table, slot);
        let next = if decode {
            vec![(i as u32 * 13) % 250 + 3] // a generated token
        } else {
            tokens[done..].to_vec()
        };
        seqs.push(Seq {
            tokens,
            table,
            slot,
            done,
            prompt_len: len,
            next,
        });
    }
    // Snapshot every slot into a spare one (slots 16.. of the runner are unused here).
    let spare = |s: &Seq| s.slot + 16;
    let snaps: Vec<(u32, u32)> = seqs.iter().map(|s| (s.slot, spare(s))).collect();
    model.copy_state_slots(&mut run.kv, &snaps).unwrap();
    let alone: Vec<Vec<Vec<f32>>> = seqs
        .iter()
        .map(|s| {
            model
                .copy_state_slots(&mut run.kv, &[(spare(s), s.slot)])
                .unwrap();
            run_piece(&mut run, &s.next, s.done, s.prompt_len, &s.table, s.slot)
        })
        .collect();
    let restore: Vec<(u32, u32)> = seqs.iter().map(|s| (spare(s), s.slot)).collect();
    model.copy_state_slots(&mut run.kv, &restore).unwrap();
    let mut b = ForwardBatch::default();
    for s in &seqs {
        b.push_in_slot(
            &s.next,
            s.done,
            s.prompt_len,
            s.table.clone(),
            s.slot,
            false,
        );
    }
    b.logits_rows = (0..b.tokens.len()).collect();
    let all = model.forward(&mut run.kv, &run.layout, &b).unwrap();
    let vocab = model.cfg.vocab_size;
    let mut row = 0;
    let mut worst = 0.0f32;
    for (i, s) in seqs.iter().enumerate() {
        for (j, want) in alone[i].iter().enumerate() {
            let d = max_abs_diff(&all[row * vocab..(row + 1) * vocab], want);
            assert!(
                d <= tol,
                "{name}: sequence {i} row {j} (of {} tokens): batched differs by {d}",
                s.tokens.len()
            );
            worst = worst.max(d);
            row += 1;
        }
    }
    eprintln!("{name}: 16 mixed sequences: max |Δlogit| {worst:.2e} batched vs alone");
}

/// A hybrid pass whose chunks share a state slot, or name one outside the pool, is
/// refused.
fn bad_state_slots_are_refused<B: Backend>(backend: B) {
    let model = Model::load(backend, &model_dir(MODELS[0])).unwrap();
    let mut run = Runner::new(&model, 64);
    let (_, t1) = run.new_seq(4);
    let (_, t2) = run.new_seq(4);
    let mut b = ForwardBatch::default();
    b.push_in_slot(&[5, 6], 0, 2, t1, 3, true);
    b.push_in_slot(&[7, 8], 0, 2, t2.clone(), 3, true);
    let e = model
        .forward(&mut run.kv, &run.layout, &b)
        .unwrap_err()
        .to_string();
    assert!(e.contains("state slot 3"), "{e}");
    let mut b = ForwardBatch::default();
    b.push_in_slot(&[7, 8], 0, 2, t2, STATE_SLOTS as u32, true);
    let e = model
        .forward(&mut run.kv, &run.layout, &b)
        .unwrap_err()
        .to_string();
    assert!(e.contains("out of range"), "{e}");
}

/// Dense models keep no state: their pools have an empty state layout whatever the slot
/// count asked, and their chunks' state slots are ignored.
fn dense_models_have_no_state<B: Backend>(backend: B) {
    let model = Model::load(backend, &repo_root().join("fixtures/models/qwen3")).unwrap();
    let layout = model.kv_layout_with_states(8, 4, inferd_runtime::KvDtype::F32, 16);
    assert_eq!(layout.state, inferd_runtime::StateLayout::default());
    assert_eq!(layout.state.slot_bytes(), 0);
    assert_eq!(layout, model.kv_layout(8, 4, inferd_runtime::KvDtype::F32));
    let mut run = Runner::new(&model, 16);
    let (_, t) = run.new_seq(3);
    let mut a = ForwardBatch::default();
    a.push_in_slot(&[5, 6, 7], 0, 3, t.clone(), 999, true);
    let mut b = ForwardBatch::default();
    b.push(&[5, 6, 7], 0, 3, t, true);
    let la = model.forward(&mut run.kv, &run.layout, &a).unwrap();
    let lb = model.forward(&mut run.kv, &run.layout, &b).unwrap();
    assert_eq!(la, lb);
}

macro_rules! backend_tests {
    ($modname:ident, $backend:expr) => {
        mod $modname {
            use super::*;
            #[test]
            fn hybrid_matches_transformers() {
                matches_transformers($backend, MODELS[0]);
            }
            #[test]
            fn nested_hybrid_matches_transformers() {
                matches_transformers($backend, MODELS[1]);
            }
            #[test]
            fn hybrid_chunked_prefill_at_any_piece_size() {
                for name in MODELS {
                    chunked_prefill($backend, name);
                }
            }
            #[test]
            fn hybrid_resume_from_snapshot_equals_recompute() {
                for name in MODELS {
                    resume_from_snapshot($backend, name);
                }
            }
            #[test]
            fn hybrid_state_slot_export_import_round_trips() {
                for name in MODELS {
                    export_import_slot($backend, name);
                }
            }
            #[test]
            fn hybrid_batch_of_16_mixed_equals_each_alone() {
                for name in MODELS {
                    batch_of_16_equals_each_alone($backend, name);
                }
            }
            #[test]
            fn hybrid_bad_state_slots_are_refused() {
                bad_state_slots_are_refused($backend);
            }
            #[test]
            fn dense_models_keep_no_state() {
                dense_models_have_no_state($backend);
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

/// A slot's image (with its KV blocks) exported on `from` after `k` tokens and imported on
/// `to`, which finishes the prompt: within `to`'s tolerance of transformers (the image is
/// the same bytes on every backend, so it carries `from`'s state as it was).
#[cfg(feature = "cuda")]
fn slot_moves_between<A: Backend, B: Backend>(from: A, to: B, name: &str) {
    let tol = profile(&from).logit_tol.max(profile(&to).logit_tol);
    let r = if from.name() == "cuda" {
        reference_for(&from, name)
    } else {
        reference_for(&to, name)
    };
    // Both ends load the weights as CUDA computes with them (bf16; the nested fixture's
    // are f32), so the two ends and the simulated reference hold the same model.
    let dir = bf16_copy(name);
    let (ma, mb) = (
        Model::load(from, &dir).unwrap(),
        Model::load(to, &dir).unwrap(),
    );
    let p = prompts(&r)
        .into_iter()
        .max_by_key(|p| p["input_ids"].as_array().unwrap().len())
        .unwrap();
    let input = ids(&p["input_ids"]);
    let (n, k) = (input.len(), 70);
    let mut a = Runner::new(&ma, 512);
    let (seq, table) = a.new_seq(n);
    let slot = Runner::<A>::slot(seq);
    run_piece(&mut a, &input[..k], 0, n, &table, slot);
    let mut state = vec![0u8; a.layout.state.slot_bytes()];
    ma.export_state_slots(&a.kv, &[slot], &mut state).unwrap();
    let used = k.div_ceil(a.layout.block_size);
    let mut blocks = vec![0u8; used * a.layout.block_bytes()];
    ma.backend
        .export_blocks(&a.kv, &table[..used], &mut blocks)
        .unwrap();

    let mut b = Runner::new(&mb, 512);
    assert_eq!(b.layout.state.slot_bytes(), state.len());
    b.new_seq(9); // other block ids and slot
    let (seq_b, table_b) = b.new_seq(n);
    let slot_b = Runner::<B>::slot(seq_b);
    mb.import_state_slots(&mut b.kv, &[slot_b], &state).unwrap();
    mb.backend
        .import_blocks(&mut b.kv, &table_b[..used], &blocks)
        .unwrap();
    let mut again = vec![0u8; state.len()];
    mb.export_state_slots(&b.kv, &[slot_b], &mut again).unwrap();
    assert_eq!(again, state, "{name}: the image read back differs");
    let rest = run_piece(&mut b, &input[k..], k, n, &table_b, slot_b);
    let want = p["logits"].as_array().unwrap();
    let mut worst = 0.0f32;
    for (i, row) in rest.iter().enumerate() {
        let d = max_abs_diff(row, &floats(&want[k + i]));
        assert!(
            d <= tol,
            "{name}: {} -> {}: position {}: |Δlogit| {d} > {tol}",
            ma.backend.name(),
            mb.backend.name(),
            k + i
        );
        worst = worst.max(d);
    }
    eprintln!(
        "{name}: slot moved {} -> {} at {k}: max |Δlogit| {worst:.2e} vs the reference",
        ma.backend.name(),
        mb.backend.name()
    );
}

#[cfg(feature = "cuda")]
#[test]
fn state_slot_images_move_between_cpu_and_cuda() {
    let Some(gpu) = cuda() else { return };
    for name in MODELS {
        // The CPU at the GPU's precision: both ends then compute the same numbers, which
        // the simulated reference holds (a float32 CPU would drift from it on these models).
        slot_moves_between(cpu_like_cuda(), gpu.clone(), name);
        slot_moves_between(gpu.clone(), cpu_like_cuda(), name);
    }
}
