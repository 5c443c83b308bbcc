//! The CUDA backend (feature `cuda`): bf16 weights, f32/bf16 activations (see
//! [`tensor`]), paged bf16 or f32 KV, cuBLASLt matrix products and inferd's own kernels
//! (`kernels/*.cu`, built by nvcc in build.rs). All work of one backend is queued on one
//! stream; host reads (`to_host`, `sample`, block export) wait for it.
//!
//! The CUDA libraries are loaded at run time: a binary with this backend starts on a
//! machine without a GPU, and [`CudaBackend::new`] says why it cannot run there.
//!
//! Hybrid models (Qwen3.5: Gated DeltaNet + gated attention) run here too: their
//! recurrent-state slots live beside the KV blocks ([`state`]), their ops in
//! [`delta_net`] (`kernels/delta_net.cu`, `kernels/delta_rule.cu`).

mod attention;
mod batch;
mod chain;
mod config;
mod contig;
mod delta_net;
mod device;
mod ffi;
mod flashinfer;
mod gemm;
mod graphs;
mod green;
mod kv;
mod profile;
mod sample;
mod split;
mod splits;
mod staging;
mod state;
mod tables;
mod tensor;
mod weight;

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub use attention::decode_cluster_capacity;
pub use batch::CudaBatch;
pub use chain::{chain_bench, ChainShape, ChainTimes};
pub use config::{CudaConfig, DecodeAttention, GEMV_LOADS, GEMV_MAX_ROWS, OWN_DECODE_MAX_ROWS};
pub use contig::PrefillKv;
pub use device::{device_count, device_info, DeviceInfo};
pub use flashinfer::prefill_bench as flashinfer_prefill_bench;
pub use flashinfer::DecodeForm;
pub use green::SmShare;
pub use kv::CudaKv;
pub use profile::{
    kernel_launches, KernelLaunch, KernelStamp, SkipOps, KERNEL_UNITS, PROBE_STAGES,
    PROBE_STAGE_NAMES,
};
pub use split::SplitPrefill;
pub use tensor::{Act, CudaTensor, CudaWeight};

use batch::{BatchPool, RopeTable};
use device::Device;
use ffi::check;
use inferd_core::sampling::Sampled;

use super::{
    AttnConfig, Backend, Keep, KvRows, NewKv, RopeConfig, RopeStyle, Rows, SampleRow, SharedSource,
    SimulatedLoss,
};
use crate::batch::ForwardBatch;
use crate::kv::{KvDtype, KvLayout};
use crate::model::LinearAttnConfig;
use crate::{Result, RuntimeError};

struct Inner {
    dev: Arc<Device>,
    gemm: gemm::Gemm,
    batches: Arc<BatchPool>,
    buckets: Mutex<std::collections::HashMap<usize, Arc<batch::BucketBuffer>>>,
    graphs: Option<graphs::Graphs>,
    /// Rows up to which products run as the matrix-vector kernel (0: never).
    gemv_rows: usize,
    gemv_loads: usize,
    decode: DecodeAttention,
    decode_splits: usize,
    /// Whether decode passes of few rows may take the tensor-core build's cluster form
    /// (`CudaConfig::cluster_merge`, never on a share of the SMs, where a cluster's
    /// blocks may not all fit).
    cluster_merge: bool,
    /// Whether passes of few rows may take the tensor-core build's wide form
    /// (`CudaConfig::no_wide_decode` off).
    wide_decode: bool,
    /// Whether the matrix-vector kernel applies SwiGLU to its gate|up products
    /// (`CudaConfig::no_gemv_swiglu` off).
    gemv_swiglu: bool,
    /// Clusters of the cluster form the device holds at once, by shape, from the
    /// occupancy calculator once each.
    decode_clusters: Mutex<Vec<(ClusterShape, usize)>>,
    /// `CudaConfig::decode_chunk_tokens` (set again by measurements).
    decode_chunk_tokens: AtomicUsize,
    skip: SkipOps,
    host_sampling: bool,
    /// Our decode kernel's split partials, allocated once at its largest size (its
    /// address is baked into graphs).  // f32 [16 · SMs · group · (head_dim + 2)]
    decode_part: Mutex<Option<device::DeviceBuffer>>,
    /// Blocks of the tensor-core decode build a multiprocessor holds, by (head_dim, query
    /// heads a KV head), from the occupancy calculator once (3 at 128 and 4, the 8B shape;
    /// fewer where more heads a group enlarge the partials).
    decode_mma_per_sm: Mutex<Vec<((usize, usize), usize)>>,
    /// Its per-(row, KV head) counters of finished splits, zero between launches (the
    /// last block to finish merges and resets).  // i32 [4 · SMs]
    decode_done: Mutex<Option<device::DeviceBuffer>>,
    rope: Mutex<Option<Arc<RopeTable>>>,
    /// FlashInfer's plan workspaces, one a plan of a pass (one pass's plans alive at a
    /// time: a pass is planned, then run): the whole pass or a mixed pass's decode rows,
    /// then its prompt chunks' runs.
    fi: Mutex<Vec<Option<flashinfer::FiWorkspace>>>,
    /// bf16 copies of the pages an 8-bit pool's prompt chunks read (FlashInfer's prefill
    /// reads bf16), grown as passes need.
    kv8_pages: Mutex<Option<flashinfer::ScratchPages>>,
    /// Block id -> its scratch page while a pass is planned (-1: none).  // [num_blocks]
    kv8_map: Mutex<Vec<i32>>,
    prefill_kv: Mutex<PrefillKv>,
    split_prefill: Mutex<SplitPrefill>,
    /// Contiguous K/V of a pass's prompt runs, refilled per layer and run (contig.rs);
    /// reserved with the backend.
    contig: contig::Scratch,
    /// Prompt runs planned so far: paged, contiguous, split (FA2).
    prompt_runs: [AtomicU64; 3],
    /// Passes planned so far whose decode rows take our decode kernel, by its form
    /// (`DecodeForm`'s value).
    decode_forms: [AtomicU64; DecodeForm::ALL.len()],
    /// `CudaConfig::lose_device_after`'s loss.
    loss: SimulatedLoss,
    /// The `sample` op's buffers (sample.rs).
    sampling: Mutex<sample::SampleScratch>,
    /// The tensor-core delta rule's per-piece products (delta_pieces.cu), grown as prompt
    /// passes need.  // f32 [pieces, n_v_heads, ifd_delta_pieces_ws_floats per pair]
    delta_ws: Mutex<Option<device::DeviceBuffer>>,
    /// Profiling only: where the decode kernels stamp their stages (profile.rs).
    probe: Mutex<Option<device::DeviceBuffer>>,
    /// Profiling only: where every unit of kernels appends its blocks' stamps (profile.rs).
    kernel_probe: Mutex<Option<device::DeviceBuffer>>,
}

/// A shape of the decode kernel's cluster form: (head_dim, query heads a KV head, splits,
/// warps a block).
type ClusterShape = (usize, usize, usize, usize);

/// A handle to one GPU's backend (cheap to clone: clones share the device and stream).
#[derive(Clone)]
pub struct CudaBackend {
    inner: Arc<Inner>,
}

impl CudaBackend {
    /// Opens device `cfg.device`; an error (never a crash) on machines without a usable
    /// GPU, driver or CUDA libraries.
    pub fn new(cfg: CudaConfig) -> Result<Self> {
        let dev = Device::open(cfg.device, cfg.share)?;
        let gemm = gemm::Gemm::new(&dev)?;
        let contig = match cfg.prefill_kv {
            PrefillKv::Paged => contig::Scratch::default(),
            _ => contig::Scratch::reserve(&dev, dev.info.total_bytes),
        };
        Ok(CudaBackend {
            inner: Arc::new(Inner {
                dev,
                gemm,
                batches: Arc::default(),
                buckets: Mutex::default(),
                graphs: (!cfg.no_graphs).then(|| graphs::Graphs::new(cfg.break_captures)),
                gemv_rows: if cfg.no_gemv { 0 } else { GEMV_MAX_ROWS },
                skip: cfg.profile_skip,
                decode_splits: cfg.decode_splits,
                cluster_merge: cfg.cluster_merge && cfg.share.is_none(),
                wide_decode: !cfg.no_wide_decode,
                gemv_swiglu: !cfg.no_gemv_swiglu,
                decode_clusters: Mutex::default(),
                decode_chunk_tokens: AtomicUsize::new(cfg.decode_chunk_tokens),
                gemv_loads: if cfg.gemv_loads == 0 {
                    GEMV_LOADS
                } else {
                    cfg.gemv_loads
                },
                decode: cfg.decode,
                host_sampling: cfg.host_sampling,
                decode_part: Mutex::new(None),
                decode_done: Mutex::new(None),
                decode_mma_per_sm: Mutex::default(),
                rope: Mutex::new(None),
                sampling: Mutex::default(),
                fi: Mutex::default(),
                kv8_pages: Mutex::new(None),
                kv8_map: Mutex::new(Vec::new()),
                prefill_kv: Mutex::new(cfg.prefill_kv),
                split_prefill: Mutex::new(cfg.split_prefill),
                contig,
                prompt_runs: Default::default(),
                decode_forms: Default::default(),
                loss: SimulatedLoss::new(cfg.lose_device_after),
                delta_ws: Mutex::new(None),
                probe: Mutex::new(None),
                kernel_probe: Mutex::new(None),
            }),
        })
    }

    /// The graph bucket `batch` is padded to, over a pool of `layout` (`batch::decode_bucket`:
    /// a hybrid model's decode chunks have one token, its state stepping once a chunk; a
    /// chunk's rows read its K/V once per block of the tensor-core build's grouped form; a
    /// pass holding a check of more than `DECODE_CHUNK_TOKENS_SPLIT` tokens that the FA2
    /// prefill would take runs its chunks as prompt chunks).
    fn bucket(&self, batch: &ForwardBatch, attn: &AttnConfig, layout: &KvLayout) -> Option<usize> {
        let mode = *self.inner.split_prefill.lock().unwrap();
        let (most, reread) = match self.inner.decode_chunk_tokens.load(Ordering::Relaxed) {
            0 => (
                // An 8-bit pool's checks keep to the decode kernel (its SIMT build reads
                // 8-bit pages itself; the prompt path would copy them to bf16 first).
                batch::chunk_limit(batch, |s| {
                    !layout.dtype.is_8bit() && split::takes(mode, s, attn)
                }),
                batch::DECODE_REREAD_POSITIONS,
            ),
            n => (n, usize::MAX),
        };
        let most = if layout.state.is_stateful() { 1 } else { most };
        let per_read = if self.decode_mma(attn, layout.dtype) {
            16 / (attn.n_heads / attn.n_kv_heads.max(1)).max(1)
        } else {
            1
        };
        batch::decode_bucket(batch, most, reread, per_read)
    }

    /// Whether decode rows take the tensor-core build of our decode kernel (bf16 KV, a
    /// shape it takes, `DecodeAttention` Auto or TensorCores).
    pub(super) fn decode_mma(&self, attn: &AttnConfig, dtype: KvDtype) -> bool {
        let group = attn.n_heads / attn.n_kv_heads.max(1);
        matches!(
            self.inner.decode,
            DecodeAttention::Auto | DecodeAttention::TensorCores
        ) && !dtype.is_8bit()
            && unsafe {
                ffi::ifd_decode_mma_supported(ffi::kv_code(dtype), int(attn.head_dim), int(group))
            } != 0
    }

    /// Starts (`true`) or ends the profiler's capture range, for `ncu --profile-from-start
    /// off`; without a profiler attached it does nothing.
    pub fn profiler(on: bool) {
        let _ = unsafe { ffi::ifd_profiler(on as c_int) };
    }

    /// Changes which K/V layout the prompt chunks of passes planned from now on read
    /// (measurement: both layouts timed on one loaded model). A backend made with
    /// `PrefillKv::Paged` reserved no scratch and stays paged.
    pub fn set_prefill_kv(&self, mode: PrefillKv) {
        *self.inner.prefill_kv.lock().unwrap() = mode;
    }

    /// Changes `CudaConfig::decode_chunk_tokens` for passes from now on (measurement: a
    /// speculative check replayed as decode rows and run eagerly as a prompt chunk, on one
    /// loaded model; graphs captured before stay valid, they do not depend on it). Only
    /// between passes: a pass's workspace is sized by the bucket `pass_rows` finds, which
    /// `prepare_batch` finds again.
    pub fn set_decode_chunk_tokens(&self, n: usize) {
        self.inner.decode_chunk_tokens.store(n, Ordering::Relaxed);
    }

    /// Changes which prompt chunks the FA2 prefill takes in passes planned from now on
    /// (measurement: both kernels timed on one loaded model).
    pub fn set_split_prefill(&self, mode: SplitPrefill) {
        *self.inner.split_prefill.lock().unwrap() = mode;
    }

    /// Makes the products of prompt passes (at least `gemm::PICK_MIN_ROWS` rows) planned
    /// from now on take cuBLASLt's heuristic candidate `pick` (0: its first, the default;
    /// measurement: `cuda_check gemmpick`). Only between passes.
    pub fn set_gemm_pick(&self, pick: usize) {
        self.inner.gemm.set_pick(pick);
    }

    /// The algorithm of each prompt-pass product planned so far, one line a shape.
    pub fn gemm_choices(&self) -> Vec<String> {
        self.inner.gemm.prompt_choices()
    }

    /// Prompt runs planned so far (one FlashInfer plan each) by the SM90 kernel: (paged,
    /// over contiguous K/V).
    pub fn prompt_runs(&self) -> (u64, u64) {
        let [p, c, _] = &self.inner.prompt_runs;
        (p.load(Ordering::Relaxed), c.load(Ordering::Relaxed))
    }

    /// Passes planned so far whose decode rows our decode kernel took, by its form.
    pub fn decode_forms(&self) -> [(DecodeForm, u64); DecodeForm::ALL.len()] {
        DecodeForm::ALL.map(|f| {
            (
                f,
                self.inner.decode_forms[f as usize].load(Ordering::Relaxed),
            )
        })
    }

    /// Prompt runs planned so far for the FA2 prefill, which splits the keys.
    pub fn split_runs(&self) -> u64 {
        self.inner.prompt_runs[2].load(Ordering::Relaxed)
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.inner.dev.info
    }

    /// Free and total device memory, in bytes.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        self.inner.dev.bind()?;
        self.inner.dev.mem_info()
    }

    /// Whether our matrix-vector kernel makes a product of `rows` rows over `k` inputs.
    fn gemv_takes(&self, rows: usize, k: usize) -> bool {
        rows <= self.inner.gemv_rows && k.is_multiple_of(8)
    }

    /// Queues `y = x · wᵀ (+ bias)` (or `y +=` it, as `y` says): by our matrix-vector kernel
    /// for up to `gemv_rows` rows (f32 results only), else by cuBLASLt.  x bf16 [n, in]
    /// One cuBLASLt algorithm per shape, chosen by the shape alone: a row's result depends
    /// on its own values and the batch size, which fixes the algorithm.
    fn product(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaWeight>,
        y: gemm::Out,
    ) -> Result<()> {
        let s = self.stream()?;
        let Operands {
            x: xp,
            w: wb,
            bias,
            out: w_out,
            inputs: w_in,
        } = operands(x, w, bias, "linear")?;
        let gemv = self.gemv_takes(x.rows, w_in);
        let (yp, add) = match y {
            gemm::Out::F32(p) if gemv => (p, 0),
            gemm::Out::AddF32(p) if gemv => (p, 1),
            y => {
                let dev = &self.inner.dev;
                return self
                    .inner
                    .gemm
                    .matmul(dev, xp, wb.ptr(), bias, y, x.rows, w_in, w_out);
            }
        };
        let bp = bias.unwrap_or(std::ptr::null());
        let (n, loads) = (int(x.rows), int(self.inner.gemv_loads));
        check(
            unsafe {
                ffi::ifd_gemv(
                    xp,
                    wb.ptr(),
                    bp,
                    yp,
                    n,
                    int(w_in),
                    int(w_out),
                    loads,
                    add,
                    s,
                )
            },
            "gemv",
        )
    }

    /// Binds the device to this thread; the stream to queue on.
    fn stream(&self) -> Result<ffi::Stream> {
        self.inner.dev.bind()?;
        Ok(self.inner.dev.stream())
    }
}

fn int(v: usize) -> c_int {
    v as c_int
}

fn same_shape(a: &CudaTensor, b: &CudaTensor, op: &str) -> Result<()> {
    if a.rows != b.rows || a.cols != b.cols {
        return Err(RuntimeError::BadBatch(format!(
            "{op}: shapes [{}, {}] and [{}, {}] differ",
            a.rows, a.cols, b.rows, b.cols
        )));
    }
    Ok(())
}

/// What a product by `w` [out, inputs] reads: x's bf16 rows [n, inputs] (its width checked
/// against the weight's), the weight, its f32 bias [out] if any, and the weight's shape.
struct Operands<'w> {
    x: *mut std::ffi::c_void,
    w: &'w device::DeviceBuffer,
    bias: Option<*const f32>,
    out: usize,
    inputs: usize,
}

fn operands<'w>(
    x: &CudaTensor,
    w: &'w CudaWeight,
    bias: Option<&CudaWeight>,
    op: &str,
) -> Result<Operands<'w>> {
    let (wb, out, inputs) = w.matrix(op)?;
    if x.cols != inputs {
        return Err(RuntimeError::BadBatch(format!(
            "{op}: input has {} columns, the weight {inputs}",
            x.cols
        )));
    }
    // (the bias is the product's one vector weight: `op` names it in an error)
    let bias = bias.map(|b| b.vector(op)).transpose()?.map(|(p, _)| p);
    Ok(Operands {
        x: x.bf16_ptr(op)?,
        w: wb,
        bias,
        out,
        inputs,
    })
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;
    type Weight = CudaWeight;
    type Kv = CudaKv;
    type Batch = CudaBatch;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn free_memory(&self) -> Option<u64> {
        self.mem_info().ok().map(|(free, _)| free as u64)
    }

    fn synchronize(&self) -> Result<()> {
        self.inner.dev.bind()?;
        self.inner.dev.sync()
    }

    fn check_device(&self) -> Result<()> {
        self.inner.dev.bind()?;
        // Not ready (600) is the stream still running; only a sticky code is a loss.
        match unsafe { ffi::ifd_stream_query(self.inner.dev.stream()) } {
            code if ffi::is_sticky(code) => check(code, "the device"),
            _ => Ok(()),
        }
    }

    fn alloc(&self, capacity: usize) -> Result<CudaTensor> {
        self.inner.dev.bind()?;
        let buf = self.inner.dev.alloc(capacity * 4)?;
        Ok(CudaTensor::new(buf, capacity))
    }

    fn load_weight(&self, src: &SharedSource, names: &[&str]) -> Result<CudaWeight> {
        self.inner.dev.bind()?;
        weight::load(&self.inner.dev, src, names)
    }

    fn load_vector(&self, src: &SharedSource, name: &str, add: f32) -> Result<CudaWeight> {
        self.inner.dev.bind()?;
        weight::load_vector(&self.inner.dev, src, name, add)
    }

    fn alloc_kv(&self, layout: &KvLayout, k_offset: Option<&[f32]>) -> Result<CudaKv> {
        // The K offset matters to 8-bit pools only (their K rows are stored minus it).
        layout.check_k_offset(k_offset)?;
        self.inner.dev.bind()?;
        CudaKv::new(&self.inner.dev, layout, k_offset)
    }

    fn copy_blocks(&self, kv: &mut CudaKv, copies: &[(u32, u32)]) -> Result<()> {
        self.inner.dev.bind()?;
        kv.copy_blocks(&self.inner.dev, copies)
    }

    fn export_blocks(&self, kv: &CudaKv, blocks: &[u32], out: &mut [u8]) -> Result<()> {
        self.inner.dev.bind()?;
        kv.export_blocks(&self.inner.dev, blocks, out)
    }

    fn import_blocks(&self, kv: &mut CudaKv, blocks: &[u32], data: &[u8]) -> Result<()> {
        self.inner.dev.bind()?;
        kv.import_blocks(&self.inner.dev, blocks, data)
    }

    fn supports_linear_attention(&self) -> bool {
        true
    }

    fn copy_state_slots(&self, kv: &mut CudaKv, copies: &[(u32, u32)]) -> Result<()> {
        self.inner.dev.bind()?;
        kv.state.copy_slots(&self.inner.dev, copies)
    }

    fn export_state_slots(&self, kv: &CudaKv, slots: &[u32], out: &mut [u8]) -> Result<()> {
        self.inner.dev.bind()?;
        kv.state.export_slots(&self.inner.dev, slots, out)
    }

    fn import_state_slots(&self, kv: &mut CudaKv, slots: &[u32], data: &[u8]) -> Result<()> {
        self.inner.dev.bind()?;
        kv.state.import_slots(&self.inner.dev, slots, data)
    }

    fn prepare_batch(
        &self,
        batch: &ForwardBatch,
        rope: &RopeConfig,
        attn: &AttnConfig,
        layout: &KvLayout,
        pool: &mut CudaKv,
    ) -> Result<CudaBatch> {
        self.inner.dev.bind()?;
        let i = &self.inner;
        if i.loss.pass() {
            check(unsafe { ffi::ifd_test_fault(i.dev.stream()) }, "test fault")?;
        }
        let kv = layout;
        let edits = pool
            .tables
            .apply(&i.dev, &batch.table_edits, layout.num_blocks)?;
        let mut b = CudaBatch::new(
            &i.dev,
            &i.batches,
            &i.buckets,
            self.bucket(batch, attn, layout),
            &i.rope,
            batch,
            rope,
            layout,
            &pool.tables,
            &edits,
        )?;
        b.scatter_edits(&i.dev)?;
        self.copy_drawn(&b, &batch.drawn)?;
        let paged_ok = kv.dtype == KvDtype::Bf16
            || (kv.dtype.is_8bit()
                && unsafe {
                    ffi::ifd_decode_supported(
                        int(attn.head_dim),
                        int(attn.n_heads / attn.n_kv_heads.max(1)),
                    )
                } != 0);
        if paged_ok && flashinfer::supports(attn.head_dim, true) {
            b.fi = Some(self.plan_attention(&b, batch, attn, kv, &pool.tables.host)?);
        }
        Ok(b)
    }

    fn pass_rows(
        &self,
        batch: &ForwardBatch,
        attn: &AttnConfig,
        layout: &KvLayout,
    ) -> (usize, usize) {
        match self.bucket(batch, attn, layout) {
            Some(k) => (k, k),
            None => (batch.n_tokens(), batch.logits_rows.len()),
        }
    }

    fn run_pass(
        &self,
        batch: &CudaBatch,
        kv: &mut CudaKv,
        ws_generation: u64,
        mut f: impl FnMut(&mut CudaKv) -> Result<()>,
    ) -> Result<()> {
        let (Some(graphs), Some(bucket)) = (&self.inner.graphs, batch.bucket) else {
            return f(kv);
        };
        let key = graphs::Key {
            bucket,
            grouped: batch
                .fi
                .as_ref()
                .is_some_and(|p| p.form == flashinfer::DecodeForm::Grouped),
            workspace: ws_generation,
            kv: kv.id,
            meta: batch.meta_generation(),
            tables: batch.tables_generation,
            rope: Arc::as_ptr(&batch.rope) as usize,
            attention: batch.fi.as_ref().map_or(0, flashinfer::Passes::fingerprint),
        };
        let s = self.stream()?;
        graphs.run(key, s, || f(kv))
    }

    fn embed(&self, table: &CudaWeight, batch: &CudaBatch, out: &mut CudaTensor) -> Result<()> {
        let s = self.stream()?;
        let (buf, _, cols) = table.matrix("embed")?;
        out.prepare(batch.n_tokens, cols, Act::F32)?; // [n_tokens, hidden]
        let o = out.f32_ptr("embed")?;
        check(
            unsafe {
                ffi::ifd_embed(
                    buf.ptr(),
                    batch.tokens(),
                    int(batch.n_tokens),
                    int(cols),
                    o,
                    s,
                )
            },
            "embed",
        )
    }

    fn rms_norm(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        eps: f32,
        out: &mut CudaTensor,
    ) -> Result<()> {
        let s = self.stream()?;
        let (wp, _) = w.vector("rms_norm")?;
        let xp = x.f32_ptr("rms_norm")?;
        out.prepare(x.rows, x.cols, Act::Bf16)?; // [n, d]
        let op = out.bf16_ptr("rms_norm")?;
        if self.inner.skip.has(SkipOps::NORM) {
            return Ok(());
        }
        check(
            unsafe { ffi::ifd_rms_norm(xp, wp, int(x.rows), int(x.cols), eps, op, s) },
            "rms_norm",
        )
    }

    fn add_rms_norm(
        &self,
        x: &mut CudaTensor,
        y: &CudaTensor,
        w: &CudaWeight,
        eps: f32,
        out: &mut CudaTensor,
    ) -> Result<()> {
        let s = self.stream()?;
        same_shape(x, y, "add_rms_norm")?;
        let (wp, _) = w.vector("add_rms_norm")?;
        let (xp, yp) = (x.f32_ptr("add_rms_norm")?, y.f32_ptr("add_rms_norm")?);
        out.prepare(x.rows, x.cols, Act::Bf16)?; // [n, d]
        let op = out.bf16_ptr("add_rms_norm")?;
        if self.inner.skip.has(SkipOps::NORM) {
            return Ok(());
        }
        check(
            unsafe { ffi::ifd_add_rms_norm(xp, yp, wp, int(x.rows), int(x.cols), eps, op, s) },
            "add_rms_norm",
        )
    }

    fn head_rms_norm(
        &self,
        x: &mut CudaTensor,
        w: &CudaWeight,
        head_dim: usize,
        eps: f32,
    ) -> Result<()> {
        let s = self.stream()?;
        let (wp, _) = w.vector("head_rms_norm")?;
        let xp = x.f32_ptr("head_rms_norm")?;
        let slices = x.len() / head_dim;
        check(
            unsafe { ffi::ifd_head_rms_norm(xp, wp, int(slices), int(head_dim), eps, s) },
            "head_rms_norm",
        )
    }

    fn linear(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaWeight>,
        batch: &CudaBatch,
        rows: Rows,
        keep: Keep,
        out: &mut CudaTensor,
    ) -> Result<()> {
        let (_, w_out, w_in) = w.matrix("linear")?;
        let gemv = self.gemv_takes(x.rows, w_in);
        // Products cuBLASLt makes for a bf16 reader are stored in bf16 (half the bytes
        // written, and read by the next kernel), where attention reads bf16 or 8-bit K/V.
        let narrow = keep == Keep::Bf16 && !gemv && bias.is_none() && batch.fi.is_some();
        out.prepare(x.rows, w_out, if narrow { Act::Bf16 } else { Act::F32 })?; // [n, out]
        let skip = match rows {
            Rows::Tokens => SkipOps::LINEAR,
            Rows::Logits => SkipOps::LM_HEAD,
        };
        if self.inner.skip.has(skip) {
            return Ok(());
        }
        let y = if narrow {
            gemm::Out::Bf16(out.bf16_ptr("linear")?)
        } else {
            gemm::Out::F32(out.f32_ptr("linear")?)
        };
        self.product(x, w, bias, y)
    }

    fn linear_add_rms_norm(
        &self,
        a: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaWeight>,
        _batch: &CudaBatch,
        x: &mut CudaTensor,
        norm: (&CudaWeight, f32),
        _y: &mut CudaTensor,
        out: &mut CudaTensor,
    ) -> Result<()> {
        // The product is added to the stream where it is made (the matrix-vector kernel's
        // `add`, cuBLASLt's beta = 1 in place): the stream is read once, not the product
        // written and read back.
        let (_, w_out, _) = w.matrix("linear")?;
        if x.rows != a.rows || x.cols != w_out {
            return Err(RuntimeError::BadBatch(format!(
                "linear_add_rms_norm: {} rows of {w_out} products into a stream of [{}, {}]",
                a.rows, x.rows, x.cols
            )));
        }
        if !self.inner.skip.has(SkipOps::LINEAR) {
            let y = gemm::Out::AddF32(x.f32_ptr("linear_add_rms_norm")?);
            self.product(a, w, bias, y)?;
        }
        self.rms_norm(x, norm.0, norm.1, out)
    }

    fn split_cols(&self, x: &CudaTensor, outs: &mut [&mut CudaTensor]) -> Result<()> {
        let s = self.stream()?;
        let xp = x.f32_ptr("split_cols")?;
        let mut col = 0;
        for o in outs.iter_mut() {
            let width = o.cols;
            o.prepare(x.rows, width, Act::F32)?;
            let op = o.f32_ptr("split_cols")?;
            check(
                unsafe {
                    ffi::ifd_copy_cols(xp, int(x.rows), int(x.cols), int(col), int(width), op, s)
                },
                "split_cols",
            )?;
            col += width;
        }
        if col != x.cols {
            return Err(RuntimeError::BadBatch(format!(
                "split_cols: pieces cover {col} of {} columns",
                x.cols
            )));
        }
        Ok(())
    }

    fn rope(&self, x: &mut CudaTensor, head_dim: usize, batch: &CudaBatch) -> Result<()> {
        let s = self.stream()?;
        let xp = x.f32_ptr("rope")?;
        let (cos, sin, half) = batch.rope_tables();
        let neox = (batch.rope_style == RopeStyle::Neox) as c_int;
        check(
            unsafe {
                ffi::ifd_rope(
                    xp,
                    int(x.rows),
                    int(x.cols),
                    int(head_dim),
                    int(half),
                    neox,
                    batch.pos(),
                    cos,
                    sin,
                    s,
                )
            },
            "rope",
        )
    }

    fn attention(
        &self,
        q: &CudaTensor,
        new: NewKv<'_, CudaTensor>,
        kv: &mut CudaKv,
        layer: usize,
        batch: &CudaBatch,
        cfg: &AttnConfig,
        out: &mut CudaTensor,
    ) -> Result<()> {
        self.attend(q, new, kv, layer, batch, cfg, out)
    }

    fn split_head_pairs(
        &self,
        x: &CudaTensor,
        head_dim: usize,
        a: &mut CudaTensor,
        b: &mut CudaTensor,
    ) -> Result<()> {
        delta_net::split_head_pairs(self.stream()?, x, head_dim, a, b)
    }

    fn sigmoid_mul(&self, x: &mut CudaTensor, gate: &CudaTensor) -> Result<()> {
        delta_net::sigmoid_mul(self.stream()?, x, gate)
    }

    fn causal_conv1d_silu(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        kv: &mut CudaKv,
        layer: usize,
        batch: &CudaBatch,
        cfg: &LinearAttnConfig,
        out: &mut CudaTensor,
    ) -> Result<()> {
        delta_net::causal_conv1d_silu(self.stream()?, x, w, kv, layer, batch, cfg, out)
    }

    fn l2_norm_heads(
        &self,
        x: &mut CudaTensor,
        head_dim: usize,
        eps: f32,
        scale: f32,
    ) -> Result<()> {
        delta_net::l2_norm_heads(self.stream()?, x, head_dim, eps, scale)
    }

    fn delta_gates(
        &self,
        a: &CudaTensor,
        b: &CudaTensor,
        a_log: &CudaWeight,
        dt_bias: &CudaWeight,
        g: &mut CudaTensor,
        beta: &mut CudaTensor,
    ) -> Result<()> {
        delta_net::delta_gates(self.stream()?, a, b, a_log, dt_bias, g, beta)
    }

    fn gated_delta_rule(
        &self,
        q: &CudaTensor,
        k: &CudaTensor,
        v: &CudaTensor,
        g: &CudaTensor,
        beta: &CudaTensor,
        kv: &mut CudaKv,
        layer: usize,
        batch: &CudaBatch,
        cfg: &LinearAttnConfig,
        out: &mut CudaTensor,
    ) -> Result<()> {
        let s = self.stream()?;
        let mut ws = self.inner.delta_ws.lock().unwrap();
        let pieces = delta_net::pieces_workspace(&self.inner.dev, &mut ws, batch, cfg)?;
        delta_net::gated_delta_rule(s, q, k, v, g, beta, kv, layer, batch, cfg, pieces, out)
    }

    fn gated_rms_norm(
        &self,
        x: &CudaTensor,
        z: &CudaTensor,
        w: &CudaWeight,
        head_dim: usize,
        eps: f32,
        out: &mut CudaTensor,
    ) -> Result<()> {
        delta_net::gated_rms_norm(self.stream()?, x, z, w, head_dim, eps, out)
    }

    fn silu_mul(&self, gate: &CudaTensor, up: &CudaTensor, out: &mut CudaTensor) -> Result<()> {
        let s = self.stream()?;
        same_shape(gate, up, "silu_mul")?;
        let (g, u) = (gate.f32_ptr("silu_mul")?, up.f32_ptr("silu_mul")?);
        out.prepare(gate.rows, gate.cols, Act::Bf16)?; // [n, ffn]
        let op = out.bf16_ptr("silu_mul")?;
        check(
            unsafe { ffi::ifd_silu_mul(g, u, gate.len(), op, s) },
            "silu_mul",
        )
    }

    fn qkv_prep(
        &self,
        qkv: &CudaTensor,
        cfg: &AttnConfig,
        norms: Option<(&CudaWeight, &CudaWeight)>,
        eps: f32,
        batch: &CudaBatch,
        store: Option<(&mut CudaKv, usize)>,
        q: &mut CudaTensor,
        k: &mut CudaTensor,
        v: &mut CudaTensor,
    ) -> Result<KvRows> {
        let s = self.stream()?;
        let (hq, hkv, d) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
        if qkv.cols != (hq + 2 * hkv) * d {
            return Err(RuntimeError::BadBatch(format!(
                "qkv_prep: {} columns for {hq} + 2 x {hkv} heads of {d}",
                qkv.cols
            )));
        }
        let (qn, kn) = match norms {
            Some((qn, kn)) => (qn.vector("q_norm")?.0, kn.vector("k_norm")?.0),
            None => (std::ptr::null(), std::ptr::null()),
        };
        let (cos, sin, half) = batch.rope_tables();
        let neox = (batch.rope_style == RopeStyle::Neox) as c_int;
        // FlashInfer reads q in bf16; our own attention (f32 KV) in f32.
        let q_bf16 = batch.fi.is_some();
        q.prepare(qkv.rows, hq * d, if q_bf16 { Act::Bf16 } else { Act::F32 })?;
        let qp = if q_bf16 {
            q.bf16_ptr("qkv_prep")?
        } else {
            q.f32_ptr("qkv_prep")?.cast()
        };
        // k and v go straight to the pool (profiling may leave out the store: then they
        // are left in their tensors for `attention`, which leaves it out too).
        let paged = store
            .filter(|_| {
                let skip = self.inner.skip;
                !skip.has(SkipOps::KV_APPEND) && !skip.has(SkipOps::QKV_PREP)
            })
            .map(|(kv, layer)| kv.paged(layer));
        let (kp, vp, rows) = match paged {
            Some(_) => (std::ptr::null_mut(), std::ptr::null_mut(), KvRows::Stored),
            None => {
                k.prepare(qkv.rows, hkv * d, Act::F32)?;
                v.prepare(qkv.rows, hkv * d, Act::F32)?;
                let (kp, vp) = (k.f32_ptr("qkv_prep")?, v.f32_ptr("qkv_prep")?);
                (kp, vp, KvRows::InTensors)
            }
        };
        if self.inner.skip.has(SkipOps::QKV_PREP) {
            return Ok(rows);
        }
        check(
            unsafe {
                ffi::ifd_qkv_prep(
                    qkv.any_ptr(),
                    (qkv.dtype() == Act::Bf16) as c_int,
                    int(qkv.rows),
                    int(hq),
                    int(hkv),
                    int(d),
                    qn,
                    kn,
                    eps,
                    int(half),
                    neox,
                    batch.pos(),
                    cos,
                    sin,
                    qp,
                    q_bf16 as c_int,
                    kp,
                    vp,
                    paged
                        .as_ref()
                        .map_or(std::ptr::null(), |p| p as *const ffi::IfdPaged),
                    batch.slot(),
                    s,
                )
            },
            "qkv_prep",
        )?;
        Ok(rows)
    }

    fn linear_swiglu(
        &self,
        h: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaWeight>,
        batch: &CudaBatch,
        proj: &mut CudaTensor,
        gate: &mut CudaTensor,
        up: &mut CudaTensor,
        out: &mut CudaTensor,
    ) -> Result<()> {
        // Where our matrix-vector kernel makes the product, it applies SwiGLU itself (the
        // same bits as the product then `swiglu`; one kernel fewer on a decode step's chain).
        let o = operands(h, w, bias, "linear_swiglu")?;
        let skip = self.inner.skip.has(SkipOps::LINEAR) || self.inner.skip.has(SkipOps::SWIGLU);
        if !self.inner.gemv_swiglu || !self.gemv_takes(h.rows, o.inputs) || skip {
            self.linear(h, w, bias, batch, Rows::Tokens, Keep::Bf16, proj)?; // [n, 2·ffn]
            return self.swiglu(proj, gate, up, out);
        }
        let s = self.stream()?;
        let (ffn, bias) = (o.out / 2, o.bias.unwrap_or(std::ptr::null()));
        out.prepare(h.rows, ffn, Act::Bf16)?; // [n, ffn]
        let op = out.bf16_ptr("linear_swiglu")?;
        let (n, loads) = (int(h.rows), int(self.inner.gemv_loads));
        check(
            unsafe {
                ffi::ifd_gemv_swiglu(
                    o.x,
                    o.w.ptr(),
                    bias,
                    op,
                    n,
                    int(o.inputs),
                    int(ffn),
                    loads,
                    s,
                )
            },
            "gemv_swiglu",
        )
    }

    fn swiglu(
        &self,
        gate_up: &CudaTensor,
        _gate: &mut CudaTensor,
        _up: &mut CudaTensor,
        out: &mut CudaTensor,
    ) -> Result<()> {
        let s = self.stream()?;
        let (n, ffn) = (gate_up.rows, gate_up.cols / 2);
        let (gp, in_bf16) = (gate_up.any_ptr(), gate_up.dtype() == Act::Bf16);
        out.prepare(n, ffn, Act::Bf16)?; // [n, ffn]
        let op = out.bf16_ptr("swiglu")?;
        if self.inner.skip.has(SkipOps::SWIGLU) {
            return Ok(());
        }
        check(
            unsafe { ffi::ifd_swiglu(gp, in_bf16 as c_int, int(n), int(ffn), op, s) },
            "swiglu",
        )
    }

    fn add_assign(&self, x: &mut CudaTensor, y: &CudaTensor) -> Result<()> {
        let s = self.stream()?;
        same_shape(x, y, "add_assign")?;
        let (xp, yp) = (x.f32_ptr("add_assign")?, y.f32_ptr("add_assign")?);
        check(unsafe { ffi::ifd_add(xp, yp, x.len(), s) }, "add_assign")
    }

    fn gather_logit_rows(
        &self,
        x: &CudaTensor,
        batch: &CudaBatch,
        out: &mut CudaTensor,
    ) -> Result<()> {
        let s = self.stream()?;
        let xp = x.f32_ptr("gather_logit_rows")?;
        out.prepare(batch.n_logits, x.cols, Act::F32)?; // [n_logits, cols]
        let op = out.f32_ptr("gather_logit_rows")?;
        check(
            unsafe {
                ffi::ifd_gather_rows(
                    xp,
                    batch.logits_rows(),
                    int(batch.n_logits),
                    int(x.cols),
                    op,
                    s,
                )
            },
            "gather_logit_rows",
        )
    }

    fn to_host(&self, x: &CudaTensor, out: &mut Vec<f32>) -> Result<()> {
        self.inner.dev.bind()?;
        let n = x.len();
        out.clear();
        match x.dtype() {
            Act::F32 => {
                out.resize(n, 0.0);
                let bytes =
                    unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast(), n * 4) };
                self.inner.dev.download(&x.buf, 0, bytes)
            }
            Act::Bf16 => {
                let mut raw = vec![0u8; n * 2];
                self.inner.dev.download(&x.buf, 0, &mut raw)?;
                out.extend(
                    raw.chunks_exact(2)
                        .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()),
                );
                Ok(())
            }
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        self.inner.graphs.as_ref().map_or_else(Vec::new, |g| {
            vec![
                ("decode_eager", g.eager.load(Relaxed)),
                ("graph_captured", g.captured.load(Relaxed)),
                ("graph_replayed", g.replayed.load(Relaxed)),
                ("graph_capture_failed", g.capture_failed.load(Relaxed)),
            ]
        })
    }

    fn from_host(
        &self,
        data: &[f32],
        rows: usize,
        cols: usize,
        out: &mut CudaTensor,
    ) -> Result<()> {
        super::check_host_shape(data, rows, cols)?;
        out.prepare(rows, cols, Act::F32)?;
        self.inner.dev.upload(&out.buf, 0, weight::as_bytes(data))
    }

    fn sample_start(
        &self,
        logits: &CudaTensor,
        rows: &mut [SampleRow<'_>],
    ) -> Result<Vec<Option<u32>>> {
        self.sample_start_rows(logits, rows)
    }

    fn sample_finish(&self, out: &mut Vec<Sampled>) -> Result<()> {
        self.sample_finish_rows(out)
    }

    fn queues_work(&self) -> bool {
        true
    }
}
