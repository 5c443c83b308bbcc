//! The CUDA backend's settings ([`CudaConfig`]) and the row counts at which its kernels
//! change (matrix-vector against cuBLASLt, inferd's decode attention against FlashInfer's).

use super::{PrefillKv, SkipOps, SmShare, SplitPrefill};

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
    /// `splits::decode_splits`; else this many, for measurement: never in the wide form;
    /// with `cluster_merge`, in the tensor-core build's cluster form where 2..=16 and its
    /// clusters fit).
    pub decode_splits: usize,
    /// Passes of few rows in the tensor-core decode build's cluster form, whose splits
    /// merge in a thread-block cluster's shared memory (`splits::cluster_forms`), where
    /// every cluster fits; by default the splits merge through L2 by the last block to
    /// finish. Off by default: on the H100 and H200 (132 SMs) only 7 clusters of 16 blocks
    /// of 8 warps fit, so one row of the 8B takes 16 splits of 4 warps, which measured no
    /// faster at 4k (5.89-5.96 against 5.83-5.89 ms a step on an H100; 1.5% faster at 2
    /// rows and at 1k; session 29, docs/gpu-notes.md).
    pub cluster_merge: bool,
    /// Keep passes of few rows in the tensor-core build's plain grid (for comparison): by
    /// default they take its wide form where it fits (`splits::wide_splits`: blocks of 8
    /// warps, one a multiprocessor, half the splits), and the cluster form is not taken.
    /// One row of the 8B at 4k took 5.73-5.74 ms a step wide against 5.86-5.88 plain, at
    /// 1k 5.64 against 5.69-5.71 (H100, session 30 call 3; docs/gpu-notes.md).
    pub no_wide_decode: bool,
    /// Make the feed-forward's gate|up product and its SwiGLU apart where the matrix-vector
    /// kernel makes the product (for comparison: by default that kernel applies SwiGLU
    /// itself, `ifd_gemv_swiglu`, to the same bits, one kernel fewer a layer).
    pub no_gemv_swiglu: bool,
    /// Profiling only: ops left out of every pass (see [`SkipOps`]; results are garbage).
    pub profile_skip: SkipOps,
    /// Every row but a plain greedy one drawn by the host sampler from its logits row read
    /// back (for comparison: by default the device runs every draw the sampler can plan).
    pub host_sampling: bool,
    /// Which K/V layout prompt chunks' attention reads (see [`PrefillKv`]).
    pub prefill_kv: PrefillKv,
    /// Which prompt chunks FlashInfer's FA2 prefill takes, splitting their keys (see
    /// [`SplitPrefill`]; by default short chunks over long contexts).
    pub split_prefill: SplitPrefill,
    /// Tokens a chunk of a decode pass (graph-replayed, each row by the decode kernel) has
    /// at most. 0: [`super::batch::DECODE_CHUNK_TOKENS`]
    /// ([`super::batch::DECODE_CHUNK_TOKENS_SPLIT`] in a pass with a longer check the FA2
    /// prefill would take), while the pass's chunks read at most
    /// [`super::batch::DECODE_REREAD_POSITIONS`] K/V positions again; 1: speculative checks
    /// run as eager prompt chunks; N: chunks of up to N tokens, whatever they read again
    /// (for measurement).
    pub decode_chunk_tokens: usize,
    /// Test support: the pass after this many (`prepare_batch` calls) starts with a kernel
    /// that stores to an invalid address, so the device is lost as it is to a real fault (a
    /// sticky error, [`crate::RuntimeError::DeviceLost`]). `inferd serve` reads it from
    /// `INFERD_TEST_LOSE_DEVICE_AFTER`, as the CPU backend does.
    pub lose_device_after: Option<u64>,
    /// Test support: the first this many graph captures are broken on purpose (a query of
    /// the capturing stream inside each, which invalidates it), so that a broken capture's
    /// fallback to an eager pass is tested on the device.
    pub break_captures: u32,
    /// Run every kernel on a share of the device's multiprocessors (a green context), so
    /// that another backend's work runs beside it on the rest (measurement: `cuda_check
    /// lanes`); `None`: the whole device.
    pub share: Option<SmShare>,
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
