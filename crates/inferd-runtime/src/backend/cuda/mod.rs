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

mod batch;
mod contig;
mod delta_net;
mod device;
mod ffi;
mod flashinfer;
mod gemm;
mod graphs;
mod kv;
mod profile;
mod sample;
mod splits;
mod staging;
mod state;
mod tables;
mod tensor;
mod weight;

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use batch::CudaBatch;
pub use contig::PrefillKv;
pub use device::{device_count, device_info, DeviceInfo};
pub use flashinfer::prefill_bench as flashinfer_prefill_bench;
pub use kv::CudaKv;
pub use profile::{
    kernel_launches, KernelLaunch, KernelStamp, SkipOps, KERNEL_UNITS, PROBE_STAGES,
    PROBE_STAGE_NAMES,
};
pub use tensor::{Act, CudaTensor, CudaWeight};

use batch::{BatchPool, RopeTable};
use device::Device;
use ffi::check;
use flashinfer::PlanKind;
use inferd_core::sampling::Sampled;

use super::{
    AttnConfig, Backend, Keep, KvRows, NewKv, RopeConfig, RopeStyle, Rows, SampleRow, SharedSource,
};
use crate::batch::{ForwardBatch, SeqChunk};
use crate::kv::{BlockTables, KvDtype, KvLayout};
use crate::model::LinearAttnConfig;
use crate::{Result, RuntimeError};

/// Settings of the CUDA backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CudaConfig {
    /// CUDA device ordinal.
    pub device: usize,
    /// Run decode passes eagerly instead of replaying captured graphs (for comparison:
    /// the two compute the same bits, since decode passes are padded to the graph buckets
    /// either way).
    pub no_graphs: bool,
    /// Every matrix product through cuBLASLt, also for decode-sized batches (for
    /// comparison: by default passes of up to [`GEMV_MAX_ROWS`] rows use inferd's own
    /// matrix-vector kernel).
    pub no_gemv: bool,
    /// 16-byte loads of a weight row each lane of the matrix-vector kernel keeps in flight
    /// (4, 8 or 16); 0: [`GEMV_LOADS`].
    pub gemv_loads: usize,
    /// Which kernel attends decode rows (bf16 KV); the default picks by the number of rows.
    pub decode: DecodeAttention,
    /// Splits of each (row, KV head) in inferd's decode attention (0: by the pass's shape,
    /// `splits::decode_splits`; else this many, for measurement).
    pub decode_splits: usize,
    /// Profiling only: ops left out of every pass (see [`SkipOps`]; results are garbage).
    pub profile_skip: SkipOps,
    /// Every row but a plain greedy one drawn by the host sampler from its logits row read
    /// back (for comparison: by default the device runs every draw the sampler can plan).
    pub host_sampling: bool,
    /// Which K/V layout prompt chunks' attention reads (see [`PrefillKv`]).
    pub prefill_kv: PrefillKv,
}

/// The kernel of decode rows' attention.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecodeAttention {
    /// inferd's tensor-core build where that takes the shape; elsewhere its SIMT build for
    /// passes of up to [`OWN_DECODE_MAX_ROWS`] rows, FlashInfer's above.
    #[default]
    Auto,
    /// Always inferd's SIMT build (`kernels/decode.cu`), where it supports the shape.
    Inferd,
    /// Always FlashInfer's.
    FlashInfer,
    /// Always inferd's, its tensor-core build where that takes the shape (bf16 KV,
    /// head_dim 64 or 128, up to 8 query heads a KV head), else its other build.
    TensorCores,
}

/// Passes of at most this many rows run their matrix products as inferd's matrix-vector
/// kernel (`kernels/gemv.cu`), which reads each weight once at close to the bandwidth
/// roofline; larger passes use cuBLASLt. (It reads x from L1 once per row for every
/// weight load, which costs more with each row: an 8B decode step at 4096 tokens on the
/// H200 took 4.68 / 5.73 ms at 1 / 2 rows, cuBLASLt's 5.08 / 5.12 (session 8, call 5, one
/// run; at 4 and 8 rows an earlier run: 6.75 / 10.5 against 6.01 / 6.26; docs/gpu-notes.md.)
/// A tensor-core build of it, W loaded straight into mma.sync fragments, measured slower
/// still: 6.45 ms at 1 row, 8.10 at 8 (session 8, call 1).)
pub const GEMV_MAX_ROWS: usize = 1;

/// The matrix-vector kernel's loads in flight per lane (see `kernels/gemv.cu`): an 8B
/// decode step at 4096 tokens, one row, took 4.83 / 4.91 / 4.75 ms with 4 / 8 / 16 on the
/// H200 (session 7, one run; docs/gpu-notes.md).
pub const GEMV_LOADS: usize = 16;

/// Decode rows take inferd's tensor-core decode attention where that takes the shape (bf16
/// KV, head_dim 64 / 128, up to 8 query heads a KV head); elsewhere passes of at most this
/// many rows take its SIMT build and larger ones FlashInfer's (8-bit pools are the SIMT
/// build's at any row count). An 8B step at 4096 tokens on the H200, forward ms, the SIMT
/// build against the tensor-core one: 4.84 / 4.75 at 1 row, 6.29 / 5.78 at 2 (session 8,
/// call 4, one run); FlashInfer's against the tensor-core one 6.86 / 6.59 at 8 rows, 11.92
/// / 9.82 at 32, 19.90 / 15.54 at 64 (session 7, call 6; docs/gpu-notes.md).
pub const OWN_DECODE_MAX_ROWS: usize = 2;

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
    /// Contiguous K/V of a pass's prompt runs, refilled per layer and run (contig.rs);
    /// reserved with the backend.
    contig: contig::Scratch,
    /// Prompt runs planned so far: paged, contiguous.
    prompt_runs: [AtomicU64; 2],
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

/// A handle to one GPU's backend (cheap to clone: clones share the device and stream).
#[derive(Clone)]
pub struct CudaBackend {
    inner: Arc<Inner>,
}

impl CudaBackend {
    /// Opens device `cfg.device`; an error (never a crash) on machines without a usable
    /// GPU, driver or CUDA libraries.
    pub fn new(cfg: CudaConfig) -> Result<Self> {
        let dev = Device::open(cfg.device)?;
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
                graphs: (!cfg.no_graphs).then(graphs::Graphs::default),
                gemv_rows: if cfg.no_gemv { 0 } else { GEMV_MAX_ROWS },
                skip: cfg.profile_skip,
                decode_splits: cfg.decode_splits,
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
                contig,
                prompt_runs: Default::default(),
                delta_ws: Mutex::new(None),
                probe: Mutex::new(None),
                kernel_probe: Mutex::new(None),
            }),
        })
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

    /// Prompt runs planned so far (one FlashInfer plan each): (paged, over contiguous K/V).
    pub fn prompt_runs(&self) -> (u64, u64) {
        let [p, c] = &self.inner.prompt_runs;
        (p.load(Ordering::Relaxed), c.load(Ordering::Relaxed))
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.inner.dev.info
    }

    /// Free and total device memory, in bytes.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        self.inner.dev.bind()?;
        self.inner.dev.mem_info()
    }

    /// FlashInfer's plans of a pass (`b`: the pass as packed, padding included), in the
    /// shared workspaces (grown when the pass does not fit). A pass of single-token rows
    /// (decodes) followed by longer chunks gets the decode kernel over the leading rows,
    /// whose K/V it reads once per KV head (the prefill kernel would read a decode row's K/V
    /// once per query head), and the prefill kernel over the rest, in runs (`plan_prompt`).
    fn plan_attention(
        &self,
        b: &CudaBatch,
        batch: &ForwardBatch,
        attn: &AttnConfig,
        kv: &KvLayout,
        tables: &BlockTables,
    ) -> Result<flashinfer::Passes> {
        let pad = b.n_tokens - batch.n_tokens();
        let lead = batch.seqs.iter().take_while(|s| s.n_tokens == 1).count();
        let group = attn.n_heads / attn.n_kv_heads;
        // Our decode kernel takes the leading decode rows (padding included, which follows
        // them in a decode pass) where it measured faster; FlashInfer's prefill the rest.
        let own_rows = if lead == batch.seqs.len() {
            lead + pad
        } else {
            lead
        };
        // 8-bit KV: FlashInfer reads bf16 only, so every decode row is ours, and the
        // prompt chunks read bf16 copies of their pages or a contiguous bf16 copy.
        let eight = kv.dtype.is_8bit();
        let mma_ok = unsafe {
            ffi::ifd_decode_mma_supported(ffi::kv_code(kv.dtype), int(attn.head_dim), int(group))
        } != 0;
        // (ours at all, by its tensor-core build)
        let (rows_ok, mma) = match self.inner.decode {
            _ if eight => (true, false),
            DecodeAttention::Auto => (own_rows <= OWN_DECODE_MAX_ROWS || mma_ok, mma_ok),
            DecodeAttention::Inferd => (true, false),
            DecodeAttention::TensorCores => (true, mma_ok),
            DecodeAttention::FlashInfer => (false, false),
        };
        let own = (own_rows > 0 || eight)
            && rows_ok
            && unsafe { ffi::ifd_decode_supported(int(attn.head_dim), int(group)) } != 0;
        let mut out = flashinfer::Passes {
            own_rows: 0,
            splits: 0,
            mma: false,
            runs: Vec::new(),
            pages: None,
        };
        if own {
            out.own_rows = own_rows;
            out.mma = mma;
            if own_rows > 0 {
                out.splits = self.decode_splits(own_rows, attn, mma)?;
            }
        } else if lead > 0 {
            // The decode rows by FlashInfer's decode kernel, then a decode pass's padding
            // rows (only a decode pass has them, and a graph bucket): one query over one
            // position of block 0 each (read, never written).
            let mut part = Part::default();
            for s in &batch.seqs[..lead] {
                part.push(tables.row(s.table), s.n_tokens, s.kv_len());
            }
            for _ in 0..pad {
                part.push(&[0], 1, 1);
            }
            let graph = b.bucket.is_some();
            let (plan, generation) = self.plan_part(0, part, attn, kv, PlanKind::Auto, graph)?;
            out.runs.push(flashinfer::Run {
                plan,
                row: 0,
                generation,
                contig: None,
            });
        }
        if lead < batch.seqs.len() {
            self.plan_prompt(&batch.seqs[lead..], lead, attn, kv, tables, &mut out)?;
        }
        Ok(out)
    }

    /// The prompt chunks of a pass (`seqs`, from row `row` on), planned into `out`: each
    /// sequence read paged or from a contiguous copy as `contig::pays` says of its chunk
    /// alone, runs of neighbours read alike one plan each (`contig::runs`). An 8-bit pool's
    /// paged runs read bf16 copies of their distinct pages, made once for all of them.
    fn plan_prompt(
        &self,
        seqs: &[SeqChunk],
        mut row: usize,
        attn: &AttnConfig,
        kv: &KvLayout,
        tables: &BlockTables,
        out: &mut flashinfer::Passes,
    ) -> Result<()> {
        let mode = *self.inner.prefill_kv.lock().unwrap();
        let capacity = self.inner.contig.capacity();
        let token_bytes = 2 * attn.n_kv_heads * attn.head_dim * 2; // bf16 K and V
        let bytes: Vec<usize> = seqs
            .iter()
            .map(|s| contig::rows(s.kv_len()) * token_bytes)
            .collect();
        let contiguous: Vec<bool> = seqs
            .iter()
            .zip(&bytes)
            .map(|(s, &b)| contig::pays(mode, s.n_tokens, s.kv_len(), b, capacity))
            .collect();
        let runs = contig::runs(&contiguous, &bytes, capacity);
        let planes = self.inner.contig.planes();
        let mut parts: Vec<Part> = runs
            .iter()
            .map(|&(first, end, _)| {
                let mut part = Part::default();
                for s in &seqs[first..end] {
                    part.push(tables.row(s.table), s.n_tokens, s.kv_len());
                }
                part
            })
            .collect();
        if kv.dtype.is_8bit() && runs.iter().any(|r| !r.2) {
            let mut paged: Vec<&mut Part> = parts
                .iter_mut()
                .zip(&runs)
                .filter(|(_, r)| !r.2)
                .map(|(p, _)| p)
                .collect();
            out.pages = Some(self.kv8_gather(&mut paged, kv)?);
        }
        for (part, &(first, end, c)) in parts.into_iter().zip(&runs) {
            let slot = out.runs.len();
            let pages = part.pages(kv.block_size);
            let (kind, contig) = match planes {
                Some((k, v)) if c => (PlanKind::Ragged, Some(flashinfer::Contig { pages, k, v })),
                _ => (PlanKind::Prefill, None),
            };
            let (plan, generation) = self.plan_part(slot, part, attn, kv, kind, false)?;
            self.inner.prompt_runs[contig.is_some() as usize].fetch_add(1, Ordering::Relaxed);
            out.runs.push(flashinfer::Run {
                plan,
                row,
                generation,
                contig,
            });
            row += seqs[first..end].iter().map(|s| s.n_tokens).sum::<usize>();
        }
        Ok(())
    }

    /// The bf16 pages the paged prompt runs of an 8-bit pass read: their distinct blocks
    /// get scratch pages 0..n in the order first met, their block tables are rewritten to
    /// them, and the blocks' ids go up to the device for `ifd_kv_dequant_pages` (run per
    /// layer).
    fn kv8_gather(&self, parts: &mut [&mut Part], kv: &KvLayout) -> Result<flashinfer::PassPages> {
        let mut map = self.inner.kv8_map.lock().unwrap();
        if map.len() < kv.num_blocks {
            map.resize(kv.num_blocks, -1);
        }
        let mut src = Vec::new();
        let mut remapped = Ok(());
        for part in parts.iter_mut() {
            remapped = part.remap(kv.block_size, &mut map, &mut src);
            if remapped.is_err() {
                break;
            }
        }
        for &b in &src {
            map[b as usize] = -1; // left as found, on success or not
        }
        remapped?;
        let mut pages = self.inner.kv8_pages.lock().unwrap();
        let page_bytes = kv.block_elems() * 2; // one bf16 page of K (or V)
        if !pages
            .as_ref()
            .is_some_and(|p| p.holds(src.len(), page_bytes))
        {
            *pages = None; // the old buffers go before the larger ones come
            *pages = Some(flashinfer::ScratchPages::new(
                &self.inner.dev,
                src.len().max(256).next_power_of_two(),
                page_bytes,
            )?);
        }
        pages.as_ref().unwrap().load(&self.inner.dev, &src)
    }

    /// FlashInfer's plan of one part of a pass in workspace `slot` (made or grown when the
    /// part does not fit); the plan and the workspace's generation.
    fn plan_part(
        &self,
        slot: usize,
        mut part: Part,
        attn: &AttnConfig,
        kv: &KvLayout,
        kind: PlanKind,
        graph: bool,
    ) -> Result<(flashinfer::Plan, u64)> {
        let shape = flashinfer::Shape {
            n_heads: attn.n_heads as i32,
            n_kv_heads: attn.n_kv_heads as i32,
            head_dim: attn.head_dim as i32,
            page_size: kv.block_size as i32,
        };
        part.finish();
        let n_seqs = part.kv_len.len();
        let tokens = *part.qo.last().unwrap() as usize;
        let pages = part.pages(kv.block_size);
        let mut ws = self.inner.fi.lock().unwrap();
        if ws.len() <= slot {
            ws.resize_with(slot + 1, || None);
        }
        if !ws[slot]
            .as_ref()
            .is_some_and(|w| w.holds(kind, shape, n_seqs, tokens, pages))
        {
            ws[slot] = None; // its buffers go before the larger ones come
            ws[slot] = Some(flashinfer::FiWorkspace::new(
                &self.inner.dev,
                shape,
                n_seqs.max(256).next_power_of_two(),
                tokens.max(8192).next_power_of_two(),
                pages.max(1 << 16).next_power_of_two(),
                kind == PlanKind::Auto,
            )?);
        }
        let w = ws[slot].as_ref().unwrap();
        let plan = w.plan(
            kind,
            &part.qo,
            &part.kv_len,
            &part.bt_off,
            &part.bt,
            graph,
            self.inner.dev.stream(),
        )?;
        Ok((plan, w.generation))
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
        let (wb, w_out, w_in) = w.matrix("linear")?;
        if x.cols != w_in {
            return Err(RuntimeError::BadBatch(format!(
                "linear: input has {} columns, the weight {w_in}",
                x.cols
            )));
        }
        let bias = bias
            .map(|b| b.vector("linear bias"))
            .transpose()?
            .map(|(p, _)| p);
        let xp = x.bf16_ptr("linear")?;
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

    /// Blocks of the tensor-core decode build a multiprocessor holds at this shape.
    fn decode_mma_per_sm(&self, attn: &AttnConfig) -> Result<usize> {
        let key = (attn.head_dim, attn.n_heads / attn.n_kv_heads);
        let mut known = self.inner.decode_mma_per_sm.lock().unwrap();
        if let Some(&(_, n)) = known.iter().find(|(k, _)| *k == key) {
            return Ok(n);
        }
        let n = unsafe { ffi::ifd_decode_mma_blocks_per_sm(key.0 as c_int, key.1 as c_int) };
        if n <= 0 {
            return Err(RuntimeError::Device(format!(
                "the tensor-core decode build reports no resident blocks at head_dim {} and \
                 {} query heads a KV head",
                key.0, key.1
            )));
        }
        known.push((key, n as usize));
        Ok(n as usize)
    }

    /// How many ranges our decode kernel splits each (row, KV head) into for `rows` rows
    /// (`splits::decode_splits`, by the build `mma` names, or the configured count); the
    /// partials' buffer is allocated the first time (outside any capture: a shape's first
    /// pass runs eagerly).
    fn decode_splits(&self, rows: usize, attn: &AttnConfig, mma: bool) -> Result<usize> {
        let sms = (self.inner.dev.info.multiprocessors as usize).max(1);
        let pairs = rows * attn.n_kv_heads;
        let splits = match self.inner.decode_splits {
            0 => {
                let per_sm = if mma {
                    Some(self.decode_mma_per_sm(attn)?)
                } else {
                    None
                };
                splits::decode_splits(pairs, sms, per_sm)
            }
            // (a fixed count, for measurement, within the kernel's buffers and counters)
            _ if pairs >= 4 * sms => 1,
            n => n
                .min(splits::MAX_SPLITS)
                .min((splits::PARTIALS_PER_SM * sms / pairs).max(1)),
        };
        if splits > 1 {
            let group = attn.n_heads / attn.n_kv_heads;
            let floats = splits::PARTIALS_PER_SM * sms * group * (attn.head_dim + 2);
            let mut part = self.inner.decode_part.lock().unwrap();
            if part.as_ref().is_none_or(|p| p.bytes() < floats * 4) {
                *part = Some(self.inner.dev.alloc(floats * 4)?);
            }
            // Several splits only while rows · KV heads < 4 · SMs: one counter each.
            let mut done = self.inner.decode_done.lock().unwrap();
            if done.is_none() {
                *done = Some(self.inner.dev.alloc_zeroed(4 * sms * 4)?);
            }
        }
        Ok(splits)
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
        let kv = layout;
        let edits = pool
            .tables
            .apply(&i.dev, &batch.table_edits, layout.num_blocks)?;
        let mut b = CudaBatch::new(
            &i.dev,
            &i.batches,
            &i.buckets,
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

    fn pass_rows(&self, batch: &ForwardBatch) -> (usize, usize) {
        match batch::decode_bucket(batch) {
            Some(k) => (k, k),
            None => (batch.n_tokens(), batch.logits_rows.len()),
        }
    }

    fn run_pass(
        &self,
        batch: &CudaBatch,
        kv: &mut CudaKv,
        ws_generation: u64,
        f: impl FnOnce(&mut CudaKv) -> Result<()>,
    ) -> Result<()> {
        let (Some(graphs), Some(bucket)) = (&self.inner.graphs, batch.bucket) else {
            return f(kv);
        };
        let key = graphs::Key {
            bucket,
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
        let s = self.stream()?;
        if cfg.head_dim > 256 || !cfg.n_heads.is_multiple_of(cfg.n_kv_heads) {
            return Err(RuntimeError::BadBatch(format!(
                "attention: head_dim {} (at most 256) with {} heads over {} KV heads",
                cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
            )));
        }
        let paged = kv.paged(layer);
        if let NewKv::Rows(k, v) = new {
            same_shape(k, v, "attention")?;
            let (kp, vp) = (k.f32_ptr("attention")?, v.f32_ptr("attention")?);
            if !self.inner.skip.has(SkipOps::KV_APPEND) {
                check(
                    unsafe { ffi::ifd_kv_append(paged, kp, vp, batch.slot(), int(k.rows), s) },
                    "kv append",
                )?;
            }
        }
        out.prepare(q.rows, q.cols, Act::Bf16)?; // [n, n_heads * head_dim]
        let op = out.bf16_ptr("attention")?;
        if self.inner.skip.has(SkipOps::ATTENTION) {
            return Ok(());
        }
        if self.inner.skip.has(SkipOps::ATTENTION_STUB) {
            let n = q.rows * q.cols;
            return check(
                unsafe { ffi::ifd_attention_stub(op.cast(), n, s) },
                "attention stub",
            );
        }
        if let Some(passes) = &batch.fi {
            let q_bf16: *mut u8 = match q.dtype() {
                // written in bf16 by qkv_prep
                Act::Bf16 => q.bf16_ptr("attention")?.cast(),
                // rounded into the upper half of out's buffer (f32-sized, so it has room):
                // out's bf16 rows fill the lower half.
                Act::F32 => {
                    let scratch = out.buf.at::<u8>(q.len() * 2);
                    flashinfer::to_bf16(q.f32_ptr("attention")?, scratch.cast(), q.len(), s)?;
                    scratch
                }
            };
            if passes.own_rows > 0 {
                let part = self.inner.decode_part.lock().unwrap();
                let pp = part
                    .as_ref()
                    .map_or(std::ptr::null_mut(), |p| p.at::<f32>(0));
                let done = self.inner.decode_done.lock().unwrap();
                let dp = done
                    .as_ref()
                    .map_or(std::ptr::null_mut(), |p| p.at::<i32>(0));
                check(
                    unsafe {
                        ffi::ifd_decode_attention(
                            paged,
                            q_bf16.cast(),
                            int(passes.own_rows),
                            int(cfg.n_heads),
                            cfg.scale,
                            batch.seq(),
                            batch.pos(),
                            batch.bt_off(),
                            batch.bt(),
                            int(passes.splits),
                            pp,
                            dp,
                            passes.mma as c_int,
                            op,
                            s,
                        )
                    },
                    "decode attention",
                )?;
            }
            // An 8-bit pool's prompt chunks read bf16 copies of their pages.
            let (pk, pv) = match &passes.pages {
                Some(p) => {
                    check(
                        unsafe { ffi::ifd_kv_dequant_pages(paged, p.src, p.n, p.k, p.v, s) },
                        "kv dequant pages",
                    )?;
                    (p.k, p.v)
                }
                None => (paged.k, paged.v),
            };
            let ws = self.inner.fi.lock().unwrap();
            let row_bytes = q.cols * 2; // bf16 rows of q and out alike
            for (slot, run) in passes.runs.iter().enumerate() {
                let (plan, w) = (
                    &run.plan,
                    ws[slot].as_ref().expect("a planned run has its workspace"),
                );
                let at = run.row * row_bytes;
                // SAFETY: the plan's rows lie inside q and out.
                let (qp, o) = unsafe { (q_bf16.add(at), op.cast::<u8>().add(at)) };
                // A ragged plan reads this layer's K/V copied out of the pool first.
                let (k, v) = match run.contig {
                    Some(c) => {
                        let (page_indptr, ids, last, tok_indptr) = plan.tables();
                        check(
                            unsafe {
                                ffi::ifd_kv_gather(
                                    paged,
                                    page_indptr,
                                    ids,
                                    last,
                                    tok_indptr,
                                    int(plan.n_seqs()),
                                    int(c.pages),
                                    c.k,
                                    c.v,
                                    s,
                                )
                            },
                            "kv gather",
                        )?;
                        (c.k, c.v)
                    }
                    None => (pk, pv),
                };
                w.run(plan, qp.cast(), k, v, o.cast(), cfg.scale, s)?;
            }
            return Ok(());
        }
        let qp = q.f32_ptr("attention")?;
        check(
            unsafe {
                ffi::ifd_attention(
                    paged,
                    qp,
                    int(q.rows),
                    int(cfg.n_heads),
                    cfg.scale,
                    batch.seq(),
                    batch.pos(),
                    batch.bt_off(),
                    batch.bt(),
                    op,
                    s,
                )
            },
            "attention",
        )
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

/// One FlashInfer plan's rows of a pass, as its planner reads them (host arrays).
#[derive(Default)]
struct Part {
    qo: Vec<i32>,     // [n_seqs + 1] query row offsets
    kv_len: Vec<i32>, // [n_seqs]
    bt_off: Vec<i32>, // [n_seqs + 1] offsets into bt
    bt: Vec<i32>,     // the block tables, end to end
}

impl Part {
    fn push(&mut self, table: &[u32], n_tokens: usize, kv_len: usize) {
        if self.qo.is_empty() {
            self.qo.push(0);
        }
        self.bt_off.push(self.bt.len() as i32);
        self.bt.extend(table.iter().map(|&x| x as i32));
        self.qo.push(self.qo.last().unwrap() + n_tokens as i32);
        self.kv_len.push(kv_len as i32);
    }

    /// Pages its sequences' K/V span (blocks of `block_size`).
    fn pages(&self, block_size: usize) -> usize {
        self.kv_len
            .iter()
            .map(|&l| (l as usize).div_ceil(block_size))
            .sum()
    }

    fn finish(&mut self) {
        if self.qo.is_empty() {
            self.qo.push(0);
        }
        self.bt_off.push(self.bt.len() as i32);
    }

    /// Rewrites the block tables (the blocks each sequence's kv_len reaches) to pages, one
    /// per distinct block: a block `map`s to a page already (from an earlier part), or gets
    /// the next, `src.len()`, and is appended to `src`. `map`: block id -> page, -1 for
    /// none, at least as long as the pool; the caller resets the entries of `src` to -1
    /// after its last part, on success or not.
    fn remap(&mut self, block_size: usize, map: &mut [i32], src: &mut Vec<i32>) -> Result<()> {
        let pool = map.len();
        let mut bad = None;
        'seqs: for (i, &len) in self.kv_len.iter().enumerate() {
            // Before `finish` the last table runs to the end of `bt`.
            let start = self.bt_off[i] as usize;
            let end = self
                .bt_off
                .get(i + 1)
                .map_or(self.bt.len(), |&e| e as usize);
            let np = (len as usize).div_ceil(block_size);
            if start + np > end {
                bad = Some(format!(
                    "sequence {i}: {} blocks for {len} tokens",
                    end - start
                ));
                break;
            }
            for b in &mut self.bt[start..start + np] {
                let Some(slot) = map.get_mut(*b as usize) else {
                    bad = Some(format!("block {b} outside the pool of {pool}"));
                    break 'seqs;
                };
                if *slot < 0 {
                    *slot = src.len() as i32;
                    src.push(*b);
                }
                *b = *slot;
            }
        }
        match bad {
            Some(why) => Err(RuntimeError::BadBatch(why)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Part;

    #[test]
    fn remap_gives_each_distinct_block_one_page() {
        // Two sequences sharing blocks 7 and 3 (a forked prefix), block tables longer
        // than their kv_len needs.
        // Remapped before `finish`, as plan_prompt does.
        let reset =
            |map: &mut Vec<i32>, src: &[i32]| src.iter().for_each(|&b| map[b as usize] = -1);
        let mut p = Part::default();
        p.push(&[7, 3, 9, 11], 5, 40); // 40 tokens in blocks of 16: 3 blocks
        p.push(&[7, 3, 2], 2, 33); // 3 blocks
        let mut map = vec![-1; 16];
        let mut src = Vec::new();
        p.remap(16, &mut map, &mut src).unwrap();
        assert_eq!(src, vec![7, 3, 9, 2]);
        assert_eq!(p.bt, vec![0, 1, 2, 11, 0, 1, 3]); // the unread entry stays as it was

        // A second part shares the first's pages and appends its own.
        let mut p2 = Part::default();
        p2.push(&[3, 5], 1, 20);
        p2.remap(16, &mut map, &mut src).unwrap();
        assert_eq!(src, vec![7, 3, 9, 2, 5]);
        assert_eq!(p2.bt, vec![1, 4]);
        reset(&mut map, &src);
        let mut q = Part::default();
        q.push(&[5, 20], 1, 20);
        q.finish();
        let mut src = Vec::new();
        assert!(
            q.remap(16, &mut map, &mut src).is_err(),
            "a block outside the pool"
        );
        reset(&mut map, &src);
        assert!(
            map.iter().all(|&m| m == -1),
            "remap marks only the blocks it lists in src"
        );
        let mut r = Part::default();
        r.push(&[1], 1, 40); // 40 tokens need 3 blocks
        r.push(&[2, 3, 4], 1, 40);
        let mut src = Vec::new();
        assert!(
            r.remap(16, &mut map, &mut src).is_err(),
            "a table shorter than its kv_len"
        );
        reset(&mut map, &src);
        // After `finish` too.
        let mut f = Part::default();
        f.push(&[4, 5], 1, 17);
        f.finish();
        let mut src = Vec::new();
        f.remap(16, &mut map, &mut src).unwrap();
        assert_eq!(src, vec![4, 5]);
    }
}
