//! FlashInfer's paged attention (`kernels/flashinfer_api.h`): split-KV decode and the
//! Hopper (FA3-style) causal prefill over inferd's block tables, for bf16 KV and head_dim
//! 64, 128 or 256. A pass is planned once on the host (FlashInfer's scheduler: tiles, KV
//! splits, exact page tables, copied into the workspace) and run per layer. Decode passes
//! padded to a graph bucket are planned in graph mode, so a captured graph stays valid.
//! A prompt run may be planned for the ragged prefill instead ([`PlanKind::Ragged`]): the
//! same kernel family over a contiguous copy of its K/V (`ifd_kv_gather`, contig.rs); or
//! for FlashInfer's FA2 prefill ([`PlanKind::Split`], head_dim 64, 128, 256), which splits the keys
//! of chunks too short to fill the SMs with the SM90 kernel's query tiles (split.rs).

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use super::device::{Device, DeviceBuffer};
use crate::{Result, RuntimeError};

#[repr(C)]
#[derive(Clone, Copy)]
struct Workspace {
    float_ws: *mut c_void,
    float_ws_bytes: usize,
    int_ws: *mut c_void,
    int_ws_bytes: usize,
    pinned_ws: *mut c_void,
    max_seqs: i32,
    max_pages: i32,
    event: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub n_heads: i32,
    pub n_kv_heads: i32,
    pub head_dim: i32,
    pub page_size: i32,
}

#[repr(C)]
struct Batch {
    n_seqs: i32,
    qo_indptr: *const i32,
    kv_len: *const i32,
    bt_off: *const i32,
    bt: *const i32,
    bt_dev: *const i32,
    split_pages: i32,
}

// `IfdFiBatch`'s size (flashinfer_api.h asserts the same).
const _: () = assert!(std::mem::size_of::<Batch>() == 56);

/// A planned pass (FlashInfer's plan info and page-table pointers), kept by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Plan {
    kind: i32,
    n_seqs: i32,
    n_tokens: i32,
    cuda_graph: i32,
    shape: Shape,
    split_kv: i32,
    kv_tokens: i32,
    fi_info: [i64; 16],
    kv_indptr: *mut i32,
    kv_indices: *mut i32,
    kv_last_page_len: *mut i32,
    kv_tok_indptr: *mut i32,
    int_ws: *mut c_void,
}

// `IfdFiPlan`'s size (flashinfer_api.h asserts the same).
const _: () = assert!(std::mem::size_of::<Plan>() == 208);

// SAFETY: plain data; its pointers are device addresses.
unsafe impl Send for Plan {}
unsafe impl Sync for Plan {}

impl Plan {
    /// Sequences of the plan.
    pub fn n_seqs(&self) -> usize {
        self.n_seqs as usize
    }

    /// A split (FA2) plan's query tile and whether it splits the keys, as FlashInfer's
    /// planner chose them (`PrefillPlanInfo::cta_tile_q`, its fourth value).
    pub fn split_shape(&self) -> (usize, bool) {
        (self.fi_info[3] as usize, self.split_kv != 0)
    }

    /// Rows of a ragged plan's contiguous K/V (each sequence's keys rounded up to
    /// `IFD_FI_RAGGED_ROW_ALIGN`).
    pub fn kv_tokens(&self) -> usize {
        self.kv_tokens as usize
    }

    /// Device addresses of the plan's page tables, `ifd_kv_gather`'s: page offsets
    /// [n_seqs + 1], page ids, the last page's tokens [n_seqs], and each sequence's first
    /// row in contiguous K/V [n_seqs + 1].
    pub fn tables(&self) -> (*const i32, *const i32, *const i32, *const i32) {
        (
            self.kv_indptr,
            self.kv_indices,
            self.kv_last_page_len,
            self.kv_tok_indptr,
        )
    }

    /// What a graph over this plan's runs depends on besides the workspace.
    pub fn fingerprint(&self) -> u64 {
        let mut h = self.kind as u64 ^ (self.n_seqs as u64) << 8 ^ (self.split_kv as u64) << 40;
        for &v in &self.fi_info {
            h = h.rotate_left(7) ^ v as u64;
        }
        h
    }
}

#[repr(C)]
struct RunArgs {
    q: *const c_void,
    k: *const c_void,
    v: *const c_void,
    out: *mut c_void,
    lse: *mut f32,
    sm_scale: f32,
}

/// Which kernel a plan is for (its value: the C API's mode, `IFD_FI_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum PlanKind {
    /// FlashInfer's choice for the pass: decode if every row is one token, else the paged
    /// SM90 prefill.
    Auto = 0,
    /// The paged SM90 prefill, whatever the rows' lengths (prompt chunks: a chunk's kernel
    /// never depends on its neighbours).
    Prefill = 2,
    /// The SM90 prefill over contiguous K/V (`ifd_kv_gather` fills it per layer).
    Ragged = 3,
    /// FlashInfer's FA2 paged prefill: a KV head's query group packed into its query
    /// tiles, the keys split to fill the SMs, the splits merged (partials in the float
    /// workspace). head_dim 64, 128, 256.
    Split = 4,
}

extern "C" {
    fn ifd_fi_workspace_bytes(
        shape: *const Shape,
        max_seqs: i32,
        max_tokens: i32,
        max_pages: i32,
        float_ws_bytes: *mut usize,
        int_ws_bytes: *mut usize,
    ) -> c_int;
    fn ifd_fi_plan(
        ws: *const Workspace,
        shape: *const Shape,
        batch: *const Batch,
        mode: c_int,
        cuda_graph: c_int,
        plan: *mut Plan,
        stream: *mut c_void,
    ) -> c_int;
    fn ifd_fi_run(
        ws: *const Workspace,
        plan: *const Plan,
        args: *const RunArgs,
        stream: *mut c_void,
    ) -> c_int;
    fn ifd_fi_f32_to_bf16(x: *const f32, out: *mut c_void, n: usize, stream: *mut c_void) -> c_int;
    fn ifd_fi_event_create(event: *mut *mut c_void) -> c_int;
    fn ifd_fi_event_destroy(event: *mut c_void) -> c_int;
    fn ifd_fi_last_error() -> *const std::ffi::c_char;
    fn ifd_fi_prefill_bench(
        n_q: c_int,
        kv_len: c_int,
        n_heads: c_int,
        n_kv: c_int,
        iters: c_int,
        paged_ms: *mut f32,
        ragged_ms: *mut f32,
        max_diff: *mut f32,
    ) -> c_int;
}

/// FlashInfer's paged and contiguous causal prefill times at head_dim 128 (measurement only,
/// `cuda_check fibench`): one sequence, `n_q` queries at the end of `kv_len` keys, on the
/// same values. Returns (paged ms, ragged ms, largest |output difference|) a launch.
pub fn prefill_bench(
    n_q: usize,
    kv_len: usize,
    n_heads: usize,
    n_kv: usize,
    iters: usize,
) -> Result<(f32, f32, f32)> {
    let (mut paged, mut ragged, mut diff) = (0f32, 0f32, 0f32);
    let int = |x: usize| c_int::try_from(x).unwrap_or(c_int::MAX);
    check(
        unsafe {
            ifd_fi_prefill_bench(
                int(n_q),
                int(kv_len),
                int(n_heads),
                int(n_kv),
                int(iters),
                &mut paged,
                &mut ragged,
                &mut diff,
            )
        },
        "prefill bench",
    )?;
    Ok((paged, ragged, diff))
}

fn check(code: c_int, what: &str) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    let msg = unsafe { std::ffi::CStr::from_ptr(ifd_fi_last_error()) }
        .to_string_lossy()
        .into_owned();
    let msg = format!(
        "FlashInfer {what}: CUDA error {code} ({}){}{msg}",
        super::ffi::error_string(code),
        if msg.is_empty() { "" } else { ": " }
    );
    Err(if super::ffi::is_sticky(code) {
        RuntimeError::DeviceLost(msg)
    } else {
        RuntimeError::Device(msg)
    })
}

/// Whether FlashInfer serves this attention: bf16 KV, head_dim 64, 128 or 256.
pub fn supports(head_dim: usize, kv_bf16: bool) -> bool {
    kv_bf16 && matches!(head_dim, 64 | 128 | 256)
}

/// One plan's buffers: device float and int workspaces and the pinned staging area.
pub struct FiWorkspace {
    shape: Shape,
    ws: Workspace,
    max_tokens: usize,
    /// Room for the decode kernel's split partials (prefill plans use no float workspace).
    decode: bool,
    _float: DeviceBuffer,
    _int: DeviceBuffer,
    pinned: *mut c_void,
    /// Distinct for every workspace (graphs over its runs are valid for it only).
    pub generation: u64,
}

/// What a workspace is made to hold: sequences, query rows and pages of a plan, and the
/// float bytes of a split plan's partials (0: none).
#[derive(Clone, Copy, Debug)]
pub struct Capacity {
    pub seqs: usize,
    pub tokens: usize,
    pub pages: usize,
    pub partials: usize,
}

// SAFETY: used under the backend's lock, one plan at a time.
unsafe impl Send for FiWorkspace {}

static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl FiWorkspace {
    /// `decode`: with room for the split kernels' partials (`PlanKind::Auto`'s decode
    /// splits, and `cap.partials` bytes for `PlanKind::Split` plans); a workspace for
    /// SM90 prefill plans alone keeps a token float buffer (those kernels use none),
    /// about 9 MB less at the 8B shape.
    pub fn new(dev: &Arc<Device>, shape: Shape, cap: Capacity, decode: bool) -> Result<Self> {
        let Capacity {
            seqs: max_seqs,
            tokens: max_tokens,
            pages: max_pages,
            partials,
        } = cap;
        let (mut fb, mut ib) = (0, 0);
        check(
            unsafe {
                ifd_fi_workspace_bytes(
                    &shape,
                    max_seqs as i32,
                    max_tokens as i32,
                    max_pages as i32,
                    &mut fb,
                    &mut ib,
                )
            },
            "workspace size",
        )?;
        if !decode {
            fb = 64 << 10;
        } else {
            fb = fb.max(partials);
        }
        let float = dev.alloc(fb)?;
        let int = dev.alloc(ib)?;
        let mut pinned = std::ptr::null_mut();
        super::ffi::check(
            unsafe { super::ffi::ifd_host_alloc(&mut pinned, ib) },
            "pinned staging",
        )?;
        let mut event = std::ptr::null_mut();
        check(unsafe { ifd_fi_event_create(&mut event) }, "event")?;
        Ok(FiWorkspace {
            shape,
            ws: Workspace {
                float_ws: float.ptr(),
                float_ws_bytes: fb,
                int_ws: int.ptr(),
                int_ws_bytes: ib,
                pinned_ws: pinned,
                max_seqs: max_seqs as i32,
                max_pages: max_pages as i32,
                event,
            },
            max_tokens,
            decode,
            _float: float,
            _int: int,
            pinned,
            generation: GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// Whether a plan of this kind, shape and size fits (`partials`: float workspace
    /// bytes a split plan of fixed pieces takes).
    pub fn holds(
        &self,
        kind: PlanKind,
        shape: Shape,
        seqs: usize,
        tokens: usize,
        pages: usize,
        partials: usize,
    ) -> bool {
        (self.decode || !matches!(kind, PlanKind::Auto | PlanKind::Split))
            && partials <= self.ws.float_ws_bytes
            && self.shape == shape
            && seqs <= self.ws.max_seqs as usize
            && tokens <= self.max_tokens
            && pages <= self.ws.max_pages as usize
    }

    /// Plans a pass: `qo_indptr` [n_seqs + 1], `kv_len` [n_seqs] and the block tables
    /// (`bt_off` [n_seqs + 1] into `bt`), all on the host. `split_pages`: a split plan's
    /// pages a key piece (> 0; other kinds 0). `graph`:
    /// plan a decode pass so that its runs can be captured and replayed.
    #[allow(clippy::too_many_arguments)]
    pub fn plan(
        &self,
        kind: PlanKind,
        qo_indptr: &[i32],
        kv_len: &[i32],
        bt_off: &[i32],
        bt: &[i32],
        split_pages: usize,
        graph: bool,
        stream: *mut c_void,
    ) -> Result<Plan> {
        let batch = Batch {
            n_seqs: kv_len.len() as i32,
            qo_indptr: qo_indptr.as_ptr(),
            kv_len: kv_len.as_ptr(),
            bt_off: bt_off.as_ptr(),
            bt: bt.as_ptr(),
            bt_dev: std::ptr::null(),
            split_pages: i32::try_from(split_pages).map_err(|_| {
                RuntimeError::Device(format!("{split_pages} pages a key piece: too many"))
            })?,
        };
        let mut plan = std::mem::MaybeUninit::<Plan>::zeroed();
        check(
            unsafe {
                ifd_fi_plan(
                    &self.ws,
                    &self.shape,
                    &batch,
                    kind as c_int,
                    graph as c_int,
                    plan.as_mut_ptr(),
                    stream,
                )
            },
            "plan",
        )?;
        Ok(unsafe { plan.assume_init() })
    }

    /// One layer's attention over the plan's rows: q bf16 `[n, n_heads * head_dim]` ->
    /// out bf16 `[n, n_heads * head_dim]`, K/V the layer's planes (a ragged plan's:
    /// contiguous bf16 `[kv_tokens, n_kv_heads, head_dim]`).
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        plan: &Plan,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        out: *mut c_void,
        scale: f32,
        stream: *mut c_void,
    ) -> Result<()> {
        let args = RunArgs {
            q,
            k,
            v,
            out,
            lse: std::ptr::null_mut(),
            sm_scale: scale,
        };
        check(unsafe { ifd_fi_run(&self.ws, plan, &args, stream) }, "run")
    }
}

/// Rounds q f32 to bf16 into `out` (room for `n` bf16 values).
pub fn to_bf16(q: *const f32, out: *mut c_void, n: usize, stream: *mut c_void) -> Result<()> {
    check(
        unsafe { ifd_fi_f32_to_bf16(q, out, n, stream) },
        "q to bf16",
    )
}

/// The form of inferd's decode kernel (`kernels/decode.cu`) a pass's own decode rows take;
/// its value is `ifd_decode_attention`'s `mma`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(i32)]
pub enum DecodeForm {
    /// The SIMT build.
    #[default]
    Simt = 0,
    /// The tensor-core build.
    TensorCores = 1,
    /// Its grouped form: a chunk's rows in one block (speculative checks).
    Grouped = 2,
    /// Its cluster form in blocks of 8 warps: a (row, KV head)'s splits one thread-block
    /// cluster.
    Clusters8 = 3,
    /// Its cluster form in blocks of 4 warps.
    Clusters4 = 4,
    /// Its wide form: blocks of 8 warps, one a multiprocessor, half the splits, merged by
    /// the last block to finish.
    Wide = 5,
}

impl DecodeForm {
    /// Every form, in the order of their values.
    pub const ALL: [DecodeForm; 6] = [
        DecodeForm::Simt,
        DecodeForm::TensorCores,
        DecodeForm::Grouped,
        DecodeForm::Clusters8,
        DecodeForm::Clusters4,
        DecodeForm::Wide,
    ];

    /// The cluster form in blocks of `warps` warps (4 or 8).
    pub fn clusters(warps: usize) -> DecodeForm {
        if warps == 8 {
            DecodeForm::Clusters8
        } else {
            DecodeForm::Clusters4
        }
    }
}

/// The planned attention of a pass (bf16 KV, or 8-bit with bf16 page copies): its leading
/// `own_rows` decode rows by inferd's decode kernel (`kernels/decode.cu`, in `splits` ranges
/// per row), then FlashInfer's plans, each over a contiguous range of rows: a decode part,
/// and its prompt chunks in runs of sequences read alike (paged, or a contiguous copy).
#[derive(Clone)]
pub struct Passes {
    pub own_rows: usize,
    pub splits: usize,
    /// The form of the decode kernel the own rows take.
    pub form: DecodeForm,
    /// Plan i lives in workspace i.
    pub runs: Vec<Run>,
    /// 8-bit pools: the bf16 pages the paged and FA2 prompt runs read.
    pub pages: Option<PassPages>,
}

/// One FlashInfer plan of a pass: its rows from `row` on, the generation of the workspace
/// it lives in, and for a ragged plan where its contiguous K/V go.
#[derive(Clone, Copy)]
pub struct Run {
    pub plan: Plan,
    pub row: usize,
    pub generation: u64,
    pub contig: Option<Contig>,
}

/// Where a ragged plan reads its contiguous K/V: `pages` pages of the pool copied per layer
/// (`ifd_kv_gather`) into bf16 `k` and `v` `[kv_tokens, n_kv_heads, head_dim]`.
#[derive(Clone, Copy)]
pub struct Contig {
    pub pages: usize,
    pub k: *mut c_void,
    pub v: *mut c_void,
}

// SAFETY: plain data; its pointers are device addresses.
unsafe impl Send for Contig {}
unsafe impl Sync for Contig {}

/// The bf16 pages of one pass over an 8-bit pool: `n` pages, page i a copy of block
/// `src[i]` (device addresses; filled per layer by `ifd_kv_dequant_pages`).
#[derive(Clone, Copy)]
pub struct PassPages {
    pub src: *const i32,
    pub n: i32,
    pub k: *mut c_void,
    pub v: *mut c_void,
}

// SAFETY: plain data; its pointers are device addresses.
unsafe impl Send for PassPages {}
unsafe impl Sync for PassPages {}

/// Scratch bf16 K and V pages, and the ids of the blocks they copy.
pub struct ScratchPages {
    pages: usize,
    page_bytes: usize,
    k: DeviceBuffer,   // bf16 [pages, n_kv_heads, block_size, head_dim]
    v: DeviceBuffer,   // bf16 [pages, n_kv_heads, block_size, head_dim]
    src: DeviceBuffer, // i32 [pages]
}

impl ScratchPages {
    pub fn new(dev: &Arc<Device>, pages: usize, page_bytes: usize) -> Result<Self> {
        Ok(ScratchPages {
            pages,
            page_bytes,
            k: dev.alloc(pages * page_bytes)?,
            v: dev.alloc(pages * page_bytes)?,
            src: dev.alloc(pages * 4)?,
        })
    }

    pub fn holds(&self, pages: usize, page_bytes: usize) -> bool {
        pages <= self.pages && page_bytes == self.page_bytes
    }

    /// Queues the upload of the blocks to copy; the pass's view of the pages.
    pub fn load(&self, dev: &Device, src: &[i32]) -> Result<PassPages> {
        dev.upload(&self.src, 0, super::weight::as_bytes(src))?;
        Ok(PassPages {
            src: self.src.at::<i32>(0),
            n: src.len() as i32,
            k: self.k.ptr(),
            v: self.v.ptr(),
        })
    }
}

impl Passes {
    /// What a graph over these runs depends on (graphs replay single-plan decode passes).
    pub fn fingerprint(&self) -> u64 {
        let mut h = (self.own_rows as u64) << 20 ^ (self.splits as u64) << 3 ^ self.form as u64;
        for r in &self.runs {
            h = h.rotate_left(17) ^ r.plan.fingerprint() ^ r.generation.rotate_left(32);
        }
        h
    }
}

impl Drop for FiWorkspace {
    fn drop(&mut self) {
        unsafe {
            ifd_fi_event_destroy(self.ws.event);
            super::ffi::ifd_host_free(self.pinned);
        }
    }
}
