//! What the subcommands share: a KV pool with a bump allocator, logits and greedy runs.

use inferd_runtime::{Backend, ForwardBatch, KvDtype, KvLayout, Model};

pub const BLOCK: usize = 16;
/// Measured device-to-device copy bandwidth of the H200 (KINDS.md), bytes/s.
pub const BANDWIDTH: f64 = 4.3e12;

/// Sequence `seq`'s synthetic prompt of `len` token ids (below `vocab`): distinct per
/// sequence, so no two share a prefix.
pub fn token_prompt(seq: usize, len: usize, vocab: usize) -> Vec<u32> {
    (0..len)
        .map(|i| ((i * 7919 + seq * 104729) % vocab) as u32)
        .collect()
}

/// A KV pool and a bump allocator of its blocks; `slots` recurrent-state slots for a
/// hybrid model (sequence i of a pass runs in slot i; dense models keep none).
pub struct Pool<B: Backend> {
    pub layout: KvLayout,
    pub kv: B::Kv,
    pub next: u32,
}

impl<B: Backend> Pool<B> {
    pub fn new(model: &Model<B>, tokens: usize, dtype: KvDtype, slots: usize) -> Self {
        let layout = model.kv_layout_with_states(tokens.div_ceil(BLOCK) + 64, BLOCK, dtype, slots);
        let kv = model.alloc_kv(&layout).unwrap();
        Pool {
            layout,
            kv,
            next: 0,
        }
    }

    pub fn table(&mut self, tokens: usize) -> Vec<u32> {
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
pub fn all_logits<B: Backend>(model: &Model<B>, ids: &[u32], chunk: usize) -> Vec<Vec<f32>> {
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

pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(
            0.0,
            |m: f32, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
        )
}

/// Greedy continuation of `n` tokens.
pub fn greedy<B: Backend>(model: &Model<B>, ids: &[u32], n: usize) -> Vec<u32> {
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

pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
