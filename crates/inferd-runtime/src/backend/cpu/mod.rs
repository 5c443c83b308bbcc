//! The CPU backend: f32 activations, weights in their stored type (SIMD
//! quantized dot products from `inferd-quant`), paged f32, Q8 or Fp8 KV, all cores via rayon.

mod attention;
mod attn_simd;
mod batch;
mod conv;
mod delta_net;
pub mod delta_rule;
mod group;
mod kv;
mod norm;
mod rope;
pub mod simd;
mod state;
mod tensor;
mod weight;

use std::sync::Arc;

use rayon::prelude::*;

pub use batch::CpuBatch;
pub use group::HostGroup;
pub use kv::{CpuKv, KvPlane};
pub use state::StatePool;
pub use tensor::{CpuTensor, CpuWeight, WeightBytes};

use inferd_core::sampling::Sampled;

use super::{
    AttnConfig, Backend, DeviceTensor, Keep, NewKv, RopeConfig, Rows, SampleRow, SharedSource,
    SimulatedLoss,
};
use crate::batch::ForwardBatch;
use crate::kv::KvLayout;
use crate::model::LinearAttnConfig;
use crate::{Result, RuntimeError};

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
    /// Round what the CUDA backend rounds to bf16 on the way into a matrix product: the
    /// RMSNorms' outputs, attention's output (and after its sigmoid gate), SwiGLU's and
    /// the gated RMSNorm's outputs. With bf16-exact weights the CPU then computes the GPU's
    /// numbers up to summation order: accuracy tests check the CUDA backend against it on
    /// models too sensitive for a float32 reference (tests/hybrid_reference.rs).
    pub bf16_like_cuda: bool,
    /// Test support: after this many passes (`prepare_batch` calls) the device is lost:
    /// every pass fails with an error that does not say so (as a GPU library's status
    /// after a fault) and `check_device` reports [`RuntimeError::DeviceLost`], so what the
    /// engine and server do then is tested on the CPU. `CpuBackend::new` reads it from
    /// `INFERD_TEST_LOSE_DEVICE_AFTER`.
    pub lose_device_after: Option<u64>,
}

impl CpuConfig {
    /// One worker per available core, or `INFERD_THREADS`; f32 activations on every row
    /// with `INFERD_F32_ACTIVATIONS=1` (what `inferd serve --f32-activations` sets).
    pub fn from_env() -> Self {
        let threads = std::env::var("INFERD_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        CpuConfig {
            threads,
            f32_activations: std::env::var("INFERD_F32_ACTIVATIONS").is_ok_and(|v| v == "1"),
            lose_device_after: super::lose_device_after_from_env(),
            ..Default::default()
        }
    }
}

/// The CPU backend owns its worker pool (one thread per core unless configured).
#[derive(Clone)]
pub struct CpuBackend {
    pool: Arc<rayon::ThreadPool>,
    linear: inferd_quant::LinearConfig,
    f32_activations: bool,
    bf16_like_cuda: bool,
    /// The draws of the sample op started last, until `sample_finish` takes them (the
    /// CPU draws at `sample_start`: every token is known on the host at once).
    drawn: Arc<std::sync::Mutex<Vec<Sampled>>>,
    /// The tensor-parallel group this backend is a rank of (`None`: the whole model).
    group: Option<HostGroup>,
    /// `CpuConfig::lose_device_after`'s loss (shared by clones).
    loss: Arc<SimulatedLoss>,
}

impl CpuBackend {
    /// [`CpuConfig::from_env`].
    pub fn new() -> Self {
        Self::with_config(CpuConfig::from_env())
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
            bf16_like_cuda: cfg.bf16_like_cuda,
            drawn: Default::default(),
            group: None,
            loss: Arc::new(SimulatedLoss::new(cfg.lose_device_after)),
        }
    }

    /// A backend for a second model run beside this one (a draft model): the same worker
    /// pool (a second pool's idle workers would spin against this one's), its own draws.
    pub fn sibling(&self) -> Self {
        CpuBackend {
            drawn: Default::default(),
            ..self.clone()
        }
    }

    /// A backend computing rank `member.shard()`'s slice of a model, its all-reduce over
    /// `member`'s group ([`HostGroup`]); each rank has its own worker pool.
    pub fn in_group(cfg: CpuConfig, member: HostGroup) -> Self {
        CpuBackend {
            group: Some(member),
            ..Self::with_config(cfg)
        }
    }

    /// `x` rounded to bf16 in place with `bf16_like_cuda` (an activation the CUDA backend
    /// stores in bf16).
    fn round_like_cuda(&self, x: &mut [f32]) {
        if self.bf16_like_cuda {
            for v in x {
                *v = half::bf16::from_f32(*v).to_f32();
            }
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

    fn check_device(&self) -> Result<()> {
        match self.loss.lost() {
            true => Err(self.loss.error()),
            false => Ok(()),
        }
    }

    fn shard(&self) -> crate::model::Shard {
        self.group
            .as_ref()
            .map_or(crate::model::Shard::WHOLE, |g| g.shard())
    }

    fn all_reduce(&self, x: &mut CpuTensor) -> Result<()> {
        match &self.group {
            Some(g) => g.all_reduce(&mut x.data),
            None => Err(RuntimeError::Other(
                "all-reduce on a CPU backend without a group".into(),
            )),
        }
    }

    fn alloc(&self, capacity: usize) -> Result<CpuTensor> {
        Ok(CpuTensor::with_capacity(capacity))
    }

    fn load_weight(&self, src: &SharedSource, names: &[&str]) -> Result<CpuWeight> {
        weight::load(src, names)
    }

    fn load_vector(&self, src: &SharedSource, name: &str, add: f32) -> Result<CpuWeight> {
        let mut v = src.tensor(name)?.to_f32_vec()?;
        v.iter_mut().for_each(|x| *x += add);
        Ok(CpuWeight::Vector(v))
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

    fn supports_linear_attention(&self) -> bool {
        true
    }

    fn copy_state_slots(&self, kv: &mut CpuKv, copies: &[(u32, u32)]) -> Result<()> {
        kv.state.copy_slots(copies)
    }

    fn export_state_slots(&self, kv: &CpuKv, slots: &[u32], out: &mut [u8]) -> Result<()> {
        kv.state.export_slots(slots, out)
    }

    fn import_state_slots(&self, kv: &mut CpuKv, slots: &[u32], data: &[u8]) -> Result<()> {
        kv.state.import_slots(slots, data)
    }

    fn prepare_batch(
        &self,
        batch: &ForwardBatch,
        rope: &RopeConfig,
        _attn: &AttnConfig,
        layout: &KvLayout,
        kv: &mut CpuKv,
    ) -> Result<CpuBatch> {
        // The loss shows as a GPU library reports one: an error of its own that does not
        // say the device is lost (`check_device` does).
        if self.loss.pass() {
            let lost = self.loss.error();
            return Err(RuntimeError::Device(format!("a library's error ({lost})")));
        }
        if let Some((i, _)) = batch.drawn.first() {
            // Every draw is known on the host once started: the caller fills them in.
            return Err(RuntimeError::BadBatch(format!(
                "token {i} left to the device's last draw, and the CPU keeps none there"
            )));
        }
        kv.tables
            .apply(&batch.table_edits, layout.num_blocks)
            .map_err(RuntimeError::BadBatch)?;
        CpuBatch::new(batch, rope, layout, &kv.tables, self.f32_activations)
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
        self.round_like_cuda(&mut out.data);
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
        _keep: Keep, // every product is kept in f32 here
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
        new: NewKv<'_, CpuTensor>,
        kv: &mut CpuKv,
        layer: usize,
        batch: &CpuBatch,
        cfg: &AttnConfig,
        out: &mut CpuTensor,
    ) -> Result<()> {
        if let NewKv::Rows(k, v) = new {
            attention::store_kv(kv, layer, k, v, batch);
        }
        out.set_shape(q.rows, q.cols)?;
        attention::attend(q, kv, layer, batch, cfg, out);
        self.round_like_cuda(&mut out.data);
        Ok(())
    }

    fn split_head_pairs(
        &self,
        x: &CpuTensor,
        head_dim: usize,
        a: &mut CpuTensor,
        b: &mut CpuTensor,
    ) -> Result<()> {
        if !x.cols.is_multiple_of(2 * head_dim) {
            return Err(RuntimeError::BadBatch(format!(
                "split_head_pairs: {} columns are not pairs of {head_dim}-wide heads",
                x.cols
            )));
        }
        a.set_shape(x.rows, x.cols / 2)?;
        b.set_shape(x.rows, x.cols / 2)?;
        delta_net::split_head_pairs(&x.data, head_dim, &mut a.data, &mut b.data);
        Ok(())
    }

    fn sigmoid_mul(&self, x: &mut CpuTensor, gate: &CpuTensor) -> Result<()> {
        check_same(x, gate, "sigmoid_mul")?;
        delta_net::sigmoid_mul(&mut x.data, &gate.data);
        self.round_like_cuda(&mut x.data);
        Ok(())
    }

    fn causal_conv1d_silu(
        &self,
        x: &CpuTensor,
        w: &CpuWeight,
        kv: &mut CpuKv,
        layer: usize,
        batch: &CpuBatch,
        cfg: &LinearAttnConfig,
        out: &mut CpuTensor,
    ) -> Result<()> {
        check_state(kv, layer, batch)?;
        if x.cols != cfg.conv_dim() || w.vector().len() != cfg.conv_dim() * cfg.conv_kernel {
            return Err(RuntimeError::BadBatch(format!(
                "causal_conv1d: input of {} columns or a kernel of {} values for {} channels of {} taps",
                x.cols,
                w.vector().len(),
                cfg.conv_dim(),
                cfg.conv_kernel
            )));
        }
        out.set_shape(x.rows, x.cols)?;
        conv::causal_conv1d_silu(x, w.vector(), &mut kv.state, layer, batch, cfg, out);
        Ok(())
    }

    fn l2_norm_heads(
        &self,
        x: &mut CpuTensor,
        head_dim: usize,
        eps: f32,
        scale: f32,
    ) -> Result<()> {
        delta_net::l2_norm_heads(&mut x.data, head_dim, eps, scale);
        Ok(())
    }

    fn delta_gates(
        &self,
        a: &CpuTensor,
        b: &CpuTensor,
        a_log: &CpuWeight,
        dt_bias: &CpuWeight,
        g: &mut CpuTensor,
        beta: &mut CpuTensor,
    ) -> Result<()> {
        check_same(a, b, "delta_gates")?;
        g.set_shape(a.rows, a.cols)?;
        beta.set_shape(a.rows, a.cols)?;
        delta_net::delta_gates(
            &a.data,
            &b.data,
            a_log.vector(),
            dt_bias.vector(),
            &mut g.data,
            &mut beta.data,
        );
        Ok(())
    }

    fn gated_delta_rule(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        g: &CpuTensor,
        beta: &CpuTensor,
        kv: &mut CpuKv,
        layer: usize,
        batch: &CpuBatch,
        cfg: &LinearAttnConfig,
        out: &mut CpuTensor,
    ) -> Result<()> {
        check_state(kv, layer, batch)?;
        let n = batch.tokens.len();
        let delta_elems = kv.state.layout.delta_elems;
        super::check_delta_rule_inputs(n, q, k, v, g, beta, delta_elems, cfg)?;
        out.set_shape(n, cfg.value_dim())?;
        delta_net::gated_delta_rule(q, k, v, g, beta, &mut kv.state, layer, batch, cfg, out);
        Ok(())
    }

    fn gated_rms_norm(
        &self,
        x: &CpuTensor,
        z: &CpuTensor,
        w: &CpuWeight,
        head_dim: usize,
        eps: f32,
        out: &mut CpuTensor,
    ) -> Result<()> {
        check_same(x, z, "gated_rms_norm")?;
        out.set_shape(x.rows, x.cols)?;
        delta_net::gated_rms_norm(&x.data, &z.data, w.vector(), head_dim, eps, &mut out.data);
        self.round_like_cuda(&mut out.data);
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
        self.round_like_cuda(&mut out.data);
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

    fn from_host(&self, data: &[f32], rows: usize, cols: usize, out: &mut CpuTensor) -> Result<()> {
        super::check_host_shape(data, rows, cols)?;
        out.set_shape(rows, cols)?;
        out.data.copy_from_slice(data);
        Ok(())
    }

    fn sample_start(
        &self,
        logits: &CpuTensor,
        rows: &mut [SampleRow<'_>],
    ) -> Result<Vec<Option<u32>>> {
        let mut out = self.drawn.lock().unwrap_or_else(|e| e.into_inner());
        self.draw_rows(logits, rows, &mut out)?;
        Ok(out.iter().map(|s| Some(s.token)).collect())
    }

    fn sample_finish(&self, out: &mut Vec<Sampled>) -> Result<()> {
        let mut drawn = self.drawn.lock().unwrap_or_else(|e| e.into_inner());
        *out = std::mem::take(&mut *drawn);
        Ok(())
    }
}

impl CpuBackend {
    /// Each row's draw from its logits row, in parallel (rows are independent).
    fn draw_rows(
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

fn check_same(a: &CpuTensor, b: &CpuTensor, op: &str) -> Result<()> {
    if (a.rows, a.cols) == (b.rows, b.cols) {
        Ok(())
    } else {
        Err(RuntimeError::BadBatch(format!(
            "{op}: [{}, {}] and [{}, {}] differ",
            a.rows, a.cols, b.rows, b.cols
        )))
    }
}

/// A state op's layer exists in the pool and the batch's slots are in it (checked
/// again here: a batch prepared for another pool must not index past this one).
fn check_state(kv: &CpuKv, layer: usize, batch: &CpuBatch) -> Result<()> {
    let l = &kv.state.layout;
    if layer >= l.n_layers {
        return Err(RuntimeError::Kv(format!(
            "state layer {layer} of a pool with {} linear layers",
            l.n_layers
        )));
    }
    let mut seen = vec![false; l.slots];
    for s in &batch.seqs {
        match seen.get_mut(s.state_slot as usize) {
            None => {
                return Err(RuntimeError::Kv(format!(
                    "state slot {} of a pool with {} slots",
                    s.state_slot, l.slots
                )))
            }
            Some(true) => {
                return Err(RuntimeError::BadBatch(format!(
                    "state slot {} is used by two chunks of the pass",
                    s.state_slot
                )))
            }
            Some(used) => *used = true,
        }
    }
    Ok(())
}
