//! A single-sequence generation driver (CLI `generate`, `speed`, tests). The
//! serving engine schedules many sequences itself; this is the simplest user of
//! the same `Model::forward` contract.

use std::time::{Duration, Instant};

use inferd_core::sampling::{Sampled, Sampler};

use crate::backend::Backend;
use crate::batch::ForwardBatch;
use inferd_core::kv::KvManager;

use crate::kv::KvDtype;
use crate::model::Model;
use crate::{Result, RuntimeError};

#[derive(Clone, Debug)]
pub struct GenerateConfig {
    pub max_new_tokens: usize,
    /// Prompt tokens per forward pass.
    pub prefill_chunk: usize,
    pub block_size: usize,
    /// Token ids that end generation (not included in the output).
    pub stop_ids: Vec<u32>,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig {
            max_new_tokens: 128,
            prefill_chunk: 512,
            block_size: 16,
            stop_ids: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct GenerateOutput {
    pub tokens: Vec<u32>,
    pub sampled: Vec<Sampled>,
    /// Whether a stop id ended generation (else the length limit did).
    pub stopped: bool,
    pub prefill_time: Duration,
    pub decode_time: Duration,
}

/// Generates after `prompt`; `on_token` sees each new token and may return `false` to stop.
pub fn generate<B: Backend>(
    model: &Model<B>,
    prompt: &[u32],
    sampler: &mut Sampler,
    cfg: &GenerateConfig,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<GenerateOutput> {
    if prompt.is_empty() {
        return Err(RuntimeError::BadBatch("empty prompt".into()));
    }
    let total = prompt.len() + cfg.max_new_tokens;
    if total > model.cfg.max_context {
        return Err(RuntimeError::BadBatch(format!(
            "prompt ({}) + max new tokens ({}) exceed the model context ({})",
            prompt.len(),
            cfg.max_new_tokens,
            model.cfg.max_context
        )));
    }
    // One sequence: one recurrent-state slot (slot 0, what `push` names) for hybrid models.
    let layout = model.kv_layout_with_states(
        total.div_ceil(cfg.block_size),
        cfg.block_size,
        KvDtype::F32,
        1,
    );
    let mut kv = model.alloc_kv(&layout)?;
    let mut kvm = KvManager::new(layout.num_blocks, layout.block_size);
    let table = kvm
        .allocate_slots(0, total)
        .ok_or_else(|| RuntimeError::Kv("pool too small for the sequence".into()))?
        .to_vec();

    let mut out = GenerateOutput::default();
    let t0 = Instant::now();
    let mut logits = Vec::new();
    let mut ws = model.workspace(cfg.prefill_chunk.max(1), 1)?;
    for (i, chunk) in prompt.chunks(cfg.prefill_chunk.max(1)).enumerate() {
        let mut b = ForwardBatch::default();
        let last = (i + 1) * cfg.prefill_chunk >= prompt.len();
        b.push(
            chunk,
            i * cfg.prefill_chunk,
            prompt.len(),
            table.clone(),
            last,
        );
        model.forward_into(&mut ws, &mut kv, &layout, &b, &mut logits)?;
    }
    out.prefill_time = t0.elapsed();

    let t1 = Instant::now();
    let mut pos = prompt.len();
    while out.tokens.len() < cfg.max_new_tokens {
        let s = sampler.sample(&logits, prompt, &out.tokens);
        let tok = s.token;
        if cfg.stop_ids.contains(&tok) {
            out.stopped = true;
            break;
        }
        out.tokens.push(tok);
        out.sampled.push(s);
        if !on_token(tok) || out.tokens.len() == cfg.max_new_tokens {
            break;
        }
        let mut b = ForwardBatch::default();
        b.push(&[tok], pos, prompt.len(), table.clone(), true);
        model.forward_into(&mut ws, &mut kv, &layout, &b, &mut logits)?;
        pos += 1;
    }
    out.decode_time = t1.elapsed();
    Ok(out)
}
