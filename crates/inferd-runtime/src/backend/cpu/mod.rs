//! The CPU backend: f32 activations, weights in their stored type (SIMD
//! quantized dot products from `inferd-quant`), paged f32 or Q8 KV, all cores via rayon.

mod attention;
mod batch;
mod kv;
mod norm;
mod rope;
pub mod simd;
mod tensor;
mod weight;

use std::sync::Arc;

use rayon::prelude::*;

pub use batch::CpuBatch;
pub use kv::{CpuKv, KvPlane};
pub use tensor::{CpuTensor, CpuWeight, WeightBytes};

use inferd_core::sampling::Sampled;

use super::{AttnConfig, Backend, DeviceTensor, RopeConfig, Rows, SampleRow, SharedSource};
use crate::batch::ForwardBatch;
use crate::kv::KvLayout;
use crate::Result;

/// Element-wise work below this many elements stays on the calling thread.
const PAR_MIN_ELEMS: usize = 1 << 15;

/// Settings of the CPU backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuConfig {
    /// Worker threads; 0 = one per available core.
    pub threads: usize,
    /// Keep activations in f32 for every matmul (dequantized weights × f32), instead of
    /// rounding them to 8 bits on the small-batch (decode) path. Slower; matches an
    /// f32 reference exactly. Used by accuracy tests.
    pub f32_activations: bool,
}

/// The CPU backend owns its worker pool (one thread per core unless configured).
#[derive(Clone)]
pub struct CpuBackend {
    pool: Arc<rayon::ThreadPool>,
    linear: inferd_quant::LinearConfig,
    f32_activations: bool,
}

impl CpuBackend {
    /// One worker per available core, or `INFERD_THREADS`.
    pub fn new() -> Self {
        let threads = std::env::var("INFERD_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Self::with_config(CpuConfig {
            threads,
            ..Default::default()
        })
    }

    pub fn with_config(cfg: CpuConfig) -> Self {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(cfg.threads)
            .thread_name(|i| format!("inferd-cpu-{i}"))
            .build()
            .expect("creating the CPU worker pool");
        let linear = inferd_quant::LinearConfig::default();
        CpuBackend {
            pool: Arc::new(pool),
            linear,
            f32_activations: cfg.f32_activations,
        }
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;
    type Weight = CpuWeight;
    type Kv = CpuKv;
    type Batch = CpuBatch;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }

    fn synchronize(&self) -> Result<()> {
        Ok(()) // every op has finished when it returns
    }

    fn alloc(&self, capacity: usize) -> Result<CpuTensor> {
        Ok(CpuTensor::with_capacity(capacity))
    }

    fn load_weight(&self, src: &SharedSource, names: &[&str]) -> Result<CpuWeight> {
        weight::load(src, names)
    }

    fn alloc_kv(&self, layout: &KvLayout, k_offset: Option<&[f32]>) -> Result<CpuKv> {
        CpuKv::new(layout, k_offset)
    }

    fn copy_blocks(&self, kv: &mut CpuKv, copies: &[(u32, u32)]) -> Result<()> {
        kv.copy_blocks(copies)
    }

    fn export_blocks(&self, kv: &CpuKv, blocks: &[u32], out: &mut [u8]) -> Result<()> {
        kv.export_blocks(blocks, out)
    }

    fn import_blocks(&self, kv: &mut CpuKv, blocks: &[u32], data: &[u8]) -> Result<()> {
        kv.import_blocks(blocks, data)
    }

    fn prepare_batch(
        &self,
        batch: &ForwardBatch,
        rope: &RopeConfig,
        _attn: &AttnConfig,
        kv: &KvLayout,
    ) -> Result<CpuBatch> {
        CpuBatch::new(batch, rope, kv, self.f32_activations)
    }

    fn embed(&self, table: &CpuWeight, batch: &CpuBatch, out: &mut CpuTensor) -> Result<()> {
        let m = table.matrix();
        out.set_shape(batch.tokens.len(), m.cols)?; // [n_tokens, hidden]
        let row_bytes = m.row_bytes();
        out.data
            .par_chunks_mut(m.cols)
            .zip(batch.tokens.par_iter())
            .for_each(|(dst, &t)| {
                let t = t as usize;
                inferd_quant::dequantize_row(
                    m.dtype,
                    &m.data[t * row_bytes..(t + 1) * row_bytes],
                    dst,
                );
            });
        Ok(())
    }

    fn rms_norm(&self, x: &CpuTensor, w: &CpuWeight, eps: f32, out: &mut CpuTensor) -> Result<()> {
        out.set_shape(x.rows, x.cols)?;
        out.data.copy_from_slice(&x.data);
        norm::rms_norm_rows(&mut out.data, x.cols, w.vector(), eps);
        Ok(())
    }

    fn add_rms_norm(
        &self,
        x: &mut CpuTensor,
        y: &CpuTensor,
        w: &CpuWeight,
        eps: f32,
        out: &mut CpuTensor,
    ) -> Result<()> {
        self.add_assign(x, y)?;
        self.rms_norm(x, w, eps, out)
    }

    fn head_rms_norm(
        &self,
        x: &mut CpuTensor,
        w: &CpuWeight,
        head_dim: usize,
        eps: f32,
    ) -> Result<()> {
        norm::rms_norm_rows(&mut x.data, head_dim, w.vector(), eps);
        Ok(())
    }

    fn linear(
        &self,
        x: &CpuTensor,
        w: &CpuWeight,
        bias: Option<&CpuWeight>,
        batch: &CpuBatch,
        rows: Rows,
        out: &mut CpuTensor,
    ) -> Result<()> {
        let m = w.matrix();
        debug_assert_eq!(x.cols, m.cols);
        let paths = match rows {
            Rows::Tokens => &batch.token_paths,
            Rows::Logits => &batch.logit_paths,
        };
        out.set_shape(x.rows, m.rows)?; // [n, out]
        inferd_quant::linear_planned(&self.linear, &m, &x.data, x.rows, paths, &mut out.data)
            .map_err(|e| crate::RuntimeError::BadBatch(format!("linear: {e}")))?;
        if let Some(b) = bias {
            let b = b.vector();
            for row in out.data.chunks_mut(m.rows) {
                for (y, bi) in row.iter_mut().zip(b) {
                    *y += bi;
                }
            }
        }
        Ok(())
    }

    fn split_cols(&self, x: &CpuTensor, outs: &mut [&mut CpuTensor]) -> Result<()> {
        debug_assert_eq!(outs.iter().map(|o| o.cols).sum::<usize>(), x.cols);
        for o in outs.iter_mut() {
            let cols = o.cols;
            o.set_shape(x.rows, cols)?;
        }
        for r in 0..x.rows {
            let mut c = 0;
            for o in outs.iter_mut() {
                let w = o.cols;
                o.data[r * w..(r + 1) * w]
                    .copy_from_slice(&x.data[r * x.cols + c..r * x.cols + c + w]);
                c += w;
            }
        }
        Ok(())
    }

    fn rope(&self, x: &mut CpuTensor, head_dim: usize, batch: &CpuBatch) -> Result<()> {
        rope::apply(x, head_dim, batch);
        Ok(())
    }

    fn attention(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        kv: &mut CpuKv,
        layer: usize,
        batch: &CpuBatch,
        cfg: &AttnConfig,
        out: &mut CpuTensor,
    ) -> Result<()> {
        attention::store_kv(kv, layer, k, v, batch);
        out.set_shape(q.rows, q.cols)?;
        attention::attend(q, kv, layer, batch, cfg, out);
        Ok(())
    }

    fn silu_mul(&self, gate: &CpuTensor, up: &CpuTensor, out: &mut CpuTensor) -> Result<()> {
        debug_assert_eq!(gate.data.len(), up.data.len());
        out.set_shape(gate.rows, gate.cols)?; // [n, ffn]
        let body = |((o, g), u): ((&mut [f32], &[f32]), &[f32])| {
            for ((o, &g), &u) in o.iter_mut().zip(g).zip(u) {
                *o = g / (1.0 + (-g).exp()) * u;
            }
        };
        const CHUNK: usize = 4096;
        if out.data.len() >= PAR_MIN_ELEMS {
            out.data
                .par_chunks_mut(CHUNK)
                .zip(gate.data.par_chunks(CHUNK))
                .zip(up.data.par_chunks(CHUNK))
                .for_each(body);
        } else {
            body(((&mut out.data[..], &gate.data[..]), &up.data[..]));
        }
        Ok(())
    }

    fn add_assign(&self, x: &mut CpuTensor, y: &CpuTensor) -> Result<()> {
        debug_assert_eq!(x.data.len(), y.data.len());
        for (a, b) in x.data.iter_mut().zip(&y.data) {
            *a += b;
        }
        Ok(())
    }

    fn gather_logit_rows(
        &self,
        x: &CpuTensor,
        batch: &CpuBatch,
        out: &mut CpuTensor,
    ) -> Result<()> {
        out.set_shape(batch.logits_rows.len(), x.cols)?;
        for (i, &r) in batch.logits_rows.iter().enumerate() {
            out.data[i * x.cols..(i + 1) * x.cols].copy_from_slice(x.row(r));
        }
        Ok(())
    }

    fn to_host(&self, x: &CpuTensor, out: &mut Vec<f32>) -> Result<()> {
        out.clear();
        out.extend_from_slice(&x.data);
        Ok(())
    }

    fn sample(
        &self,
        logits: &CpuTensor,
        rows: &mut [SampleRow<'_>],
        out: &mut Vec<Sampled>,
    ) -> Result<()> {
        let vocab = logits.cols;
        if let Some(r) = rows.iter().find(|r| r.row >= logits.rows) {
            return Err(crate::RuntimeError::BadBatch(format!(
                "sampling row {} of a pass with {} logits rows",
                r.row, logits.rows
            )));
        }
        // Rows are independent (each its own sampler): drawn in parallel, in the pool.
        self.pool.install(|| {
            rows.par_iter_mut()
                .map(|r| {
                    let l = &logits.data[r.row * vocab..(r.row + 1) * vocab];
                    r.sampler.sample_with(l, r.prompt, r.generated, &r.extra)
                })
                .collect_into_vec(out)
        });
        Ok(())
    }
}
