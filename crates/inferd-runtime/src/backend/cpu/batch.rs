//! Per-pass metadata prepared once for all layers.

use crate::backend::{RopeConfig, RopeStyle};
use crate::batch::{ForwardBatch, SeqChunk};
use crate::kv::{BlockTables, KvLayout};
use crate::{Result, RuntimeError};
use inferd_quant::RowPath;

pub struct CpuBatch {
    pub tokens: Vec<u32>,    // [n_tokens]
    pub positions: Vec<u32>, // [n_tokens]
    /// KV pool slot of each token: (block, slot in block).  // [n_tokens]
    pub slots: Vec<(u32, u32)>,
    pub seqs: Vec<SeqChunk>,
    /// Which chunk each token belongs to.  // [n_tokens]
    pub seq_of_token: Vec<u32>,
    pub logits_rows: Vec<usize>,
    /// Matmul path of each token row: prompt rows f32, generated rows 8-bit.  // [n_tokens]
    pub token_paths: Vec<RowPath>,
    /// Path of each logits row (that of the token row it comes from).  // [n_logits]
    pub logit_paths: Vec<RowPath>,
    pub rope_style: RopeStyle,
    pub rotary_dim: usize,
    pub cos: Vec<f32>, // [n_tokens, rotary_dim / 2]
    pub sin: Vec<f32>, // [n_tokens, rotary_dim / 2]
}

impl CpuBatch {
    /// `f32_activations`: every row takes the f32 path. `tables`: the pool's, with the
    /// pass's edits applied.
    pub fn new(
        b: &ForwardBatch,
        rope: &RopeConfig,
        kv: &KvLayout,
        tables: &BlockTables,
        f32_activations: bool,
    ) -> Result<Self> {
        b.validate(kv.block_size, tables)
            .map_err(RuntimeError::BadBatch)?;
        if kv.state.is_stateful() {
            b.validate_state_slots(kv.state.slots)
                .map_err(RuntimeError::BadBatch)?;
        }
        let positions = b.positions();
        let mut slots = Vec::with_capacity(b.n_tokens());
        let mut seq_of_token = Vec::with_capacity(b.n_tokens());
        for (si, s) in b.seqs.iter().enumerate() {
            let table = tables.row(s.table);
            for i in 0..s.n_tokens {
                let p = s.start_pos + i;
                slots.push((table[p / kv.block_size], (p % kv.block_size) as u32));
                seq_of_token.push(si as u32);
            }
        }
        let half = rope.rotary_dim / 2;
        let inv: Vec<f32> = (0..half).map(|i| rope.inv_freq(i)).collect();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &p in &positions {
            for &f in &inv {
                // Angle rounded to f32 as references do; cos/sin evaluated precisely.
                let a = (p as f32 * f) as f64;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        let token_paths: Vec<RowPath> = b
            .generated_rows()
            .into_iter()
            .map(|g| {
                if g && !f32_activations {
                    RowPath::Dot
                } else {
                    RowPath::Gemm
                }
            })
            .collect();
        let logit_paths = b.logits_rows.iter().map(|&r| token_paths[r]).collect();
        Ok(CpuBatch {
            token_paths,
            logit_paths,
            tokens: b.tokens.clone(),
            positions,
            slots,
            seqs: b.seqs.clone(),
            seq_of_token,
            logits_rows: b.logits_rows.clone(),
            rope_style: rope.style,
            rotary_dim: rope.rotary_dim,
            cos,
            sin,
        })
    }

    /// A batch of a pass built by [`ForwardBatch::push`] alone, over tables of its own
    /// (the op tests).
    #[cfg(test)]
    pub fn standalone(b: &ForwardBatch, rope: &RopeConfig, kv: &KvLayout) -> Result<Self> {
        let mut tables = BlockTables::default();
        tables
            .apply(&b.table_edits, kv.num_blocks)
            .map_err(RuntimeError::BadBatch)?;
        CpuBatch::new(b, rope, kv, &tables, false)
    }
}
