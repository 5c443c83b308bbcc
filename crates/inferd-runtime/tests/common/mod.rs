//! Helpers shared by the runtime's end-to-end tests. Every test body is generic
//! over `Backend`, so each backend runs the same checks.

#![allow(dead_code)]

pub mod quality;

use std::path::PathBuf;

use inferd_core::kv::KvManager;
use inferd_runtime::{Backend, ForwardBatch, KvDtype, Model};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Recurrent-state slots of a runner's pool (hybrid models; dense ones get none): a
/// sequence runs in slot `seq % STATE_SLOTS`.
pub const STATE_SLOTS: usize = 48;

/// A model plus its own KV pool and KV manager: enough to run sequences by hand.
pub struct Runner<'m, B: Backend> {
    pub model: &'m Model<B>,
    pub layout: inferd_runtime::KvLayout,
    pub kv: B::Kv,
    pub kvm: KvManager,
    next_seq: u64,
}

impl<'m, B: Backend> Runner<'m, B> {
    /// A runner with an f32 KV pool for `tokens` tokens (plus spare blocks).
    pub fn new(model: &'m Model<B>, tokens: usize) -> Self {
        Self::with_dtype(model, tokens, KvDtype::F32)
    }

    pub fn with_dtype(model: &'m Model<B>, tokens: usize, dtype: KvDtype) -> Self {
        Self::with_blocks(model, tokens, dtype, 4) // small blocks: every test crosses them
    }

    /// A runner with blocks of `bs` tokens.
    pub fn with_blocks(model: &'m Model<B>, tokens: usize, dtype: KvDtype, bs: usize) -> Self {
        let layout = model.kv_layout_with_states(tokens.div_ceil(bs) + 8, bs, dtype, STATE_SLOTS);
        let kv = model.alloc_kv(&layout).unwrap();
        Runner {
            model,
            layout,
            kv,
            kvm: KvManager::new(layout.num_blocks, bs),
            next_seq: 0,
        }
    }

    /// A fresh sequence id with blocks for `n_tokens`.
    pub fn new_seq(&mut self, n_tokens: usize) -> (u64, Vec<u32>) {
        self.next_seq += 1;
        let table = self
            .kvm
            .allocate_slots(self.next_seq, n_tokens)
            .expect("KV pool too small")
            .to_vec();
        (self.next_seq, table)
    }

    /// The recurrent-state slot of sequence `seq`.
    pub fn slot(seq: u64) -> u32 {
        (seq % STATE_SLOTS as u64) as u32
    }

    /// Logits of every position of `ids`, prefilled in chunks of `chunk`.  -> [n][vocab]
    pub fn prompt_logits(&mut self, ids: &[u32], chunk: usize) -> Vec<Vec<f32>> {
        let (seq, table) = self.new_seq(ids.len());
        let vocab = self.model.cfg.vocab_size;
        let mut out = Vec::new();
        for (i, c) in ids.chunks(chunk).enumerate() {
            let mut b = ForwardBatch::default();
            b.push_in_slot(
                c,
                i * chunk,
                ids.len(),
                table.clone(),
                Self::slot(seq),
                false,
            );
            b.logits_rows = (0..c.len()).collect();
            let l = self.model.forward(&mut self.kv, &self.layout, &b).unwrap();
            out.extend(l.chunks(vocab).map(|r| r.to_vec()));
        }
        self.kvm.free(seq);
        out
    }

    /// Greedy continuation of `n` tokens (prefill in one pass, then one token per pass).
    pub fn greedy(&mut self, ids: &[u32], n: usize) -> Vec<u32> {
        let (seq, table) = self.new_seq(ids.len() + n);
        let slot = Self::slot(seq);
        let mut b = ForwardBatch::default();
        b.push_in_slot(ids, 0, ids.len(), table.clone(), slot, true);
        let mut logits = self.model.forward(&mut self.kv, &self.layout, &b).unwrap();
        let mut out = Vec::new();
        for i in 0..n {
            let t = argmax(&logits);
            out.push(t);
            if i + 1 == n {
                break;
            }
            let mut b = ForwardBatch::default();
            b.push_in_slot(&[t], ids.len() + i, ids.len(), table.clone(), slot, true);
            logits = self.model.forward(&mut self.kv, &self.layout, &b).unwrap();
        }
        self.kvm.free(seq);
        out
    }
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        // A NaN on either side is as far off as it gets (f32::max would skip it).
        .map(|(x, y)| {
            let d = (x - y).abs();
            if d.is_nan() {
                f32::INFINITY
            } else {
                d
            }
        })
        .fold(0.0, f32::max)
}

/// A pulled real model in the cache (`$INFERD_CACHE_DIR` or `~/.cache/inferd`), or
/// `None` (with a note) when absent; with `INFERD_REQUIRE_MODELS=1` absence fails.
pub fn real_model(dir: &str, file: &str) -> Option<PathBuf> {
    let base = std::env::var_os("INFERD_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/inferd")))
        .unwrap_or_default();
    let p = base.join("models").join(dir).join(file);
    if p.exists() {
        return Some(p);
    }
    if std::env::var("INFERD_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
        panic!("{} is missing: run `inferd pull {dir}`", p.display());
    }
    eprintln!(
        "note: {} absent, skipping (run `inferd pull {dir}`)",
        p.display()
    );
    None
}

/// What a backend's results are held to in the shared test bodies.
#[derive(Clone, Copy, Debug)]
pub struct Profile {
    /// |Δlogit| against an f32 reference (transformers in float32 on the same weights).
    pub logit_tol: f32,
    /// |Δlogit| of one sequence alone against it inside a batch, or prefilled in chunks.
    pub batch_tol: f32,
    /// KV dtypes the backend stores.
    pub kv_dtypes: &'static [KvDtype],
    /// Whether a row's bits are the same whatever the pass's shape (the CPU's fixed
    /// arithmetic paths; the CUDA backend's matrix products follow the pass's row count).
    pub shape_exact: bool,
}

/// The CPU computes in f32 (summation order aside); the CUDA backend rounds weights
/// and matrix-product inputs to bf16 (8 significant bits), so its logits move by a few
/// hundredths, and one row's bf16 rounding may differ between batch shapes.
pub fn profile<B: Backend>(b: &B) -> Profile {
    match b.name() {
        "cuda" => Profile {
            logit_tol: 0.25,
            batch_tol: 0.1,
            kv_dtypes: &[KvDtype::F32, KvDtype::Bf16, KvDtype::Q8, KvDtype::Fp8],
            shape_exact: false,
        },
        _ => Profile {
            logit_tol: 2e-3,
            batch_tol: 1e-4,
            kv_dtypes: &[KvDtype::F32, KvDtype::Q8, KvDtype::Fp8],
            shape_exact: true,
        },
    }
}

/// The CUDA backend on device 0, or `None` (with a note) on a machine without a usable
/// GPU; with `INFERD_REQUIRE_GPU=1` that fails instead. Test macros call it as
/// `match cuda() { Some(b) => b, None => return }`.
#[cfg(feature = "cuda")]
pub fn cuda() -> Option<inferd_runtime::CudaBackend> {
    match inferd_runtime::CudaBackend::new(Default::default()) {
        Ok(b) => Some(b),
        Err(e) if std::env::var("INFERD_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("INFERD_REQUIRE_GPU=1 but: {e}")
        }
        Err(e) => {
            eprintln!("note: no GPU, skipping: {e}");
            None
        }
    }
}

/// Token ids of a JSON array (fixtures).
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Numbers of a JSON array (fixtures).
pub fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// A greedy continuation `got` equals the reference prompt `p`'s (`greedy`) up to the
/// reference's first near-tie (a `greedy_margin` within 2·tol, after which the two may
/// legitimately diverge), and wholly when there is none.
pub fn assert_greedy_matches(got: &[u32], p: &serde_json::Value, tol: f32, name: &str) {
    let want = ids(&p["greedy"]);
    let n = floats(&p["greedy_margin"])
        .iter()
        .position(|&m| m <= 2.0 * tol)
        .unwrap_or(want.len());
    assert_eq!(
        got[..n],
        want[..n],
        "{name} {}: greedy continuation",
        p["name"]
    );
    if n == want.len() {
        assert_eq!(got, &want[..]);
    }
}
