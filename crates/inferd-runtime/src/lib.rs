//! inferd-runtime: everything that turns weights and token ids into logits.
//!
//! - [`backend`]: the `Backend` boundary (ops that model code is written against once)
//!   with the CPU implementation and, with feature `cuda`, the CUDA one.
//! - [`kv`]: the paged KV-cache layout (blocks of tokens addressed through block tables).
//! - [`batch`]: the typed description of one forward pass over many sequences.
//! - [`model`]: model configs, weight loading with validation, and the decoder
//!   architectures (Llama, Qwen2, Qwen3, the Qwen3.5 hybrid).
//! - [`generate`]: a small single-sequence driver used by the CLI and tests.

pub mod backend;
pub mod batch;
pub mod error;
pub mod generate;
pub mod kv;
pub mod model;

pub use backend::cpu::{CpuBackend, CpuConfig, HostGroup};
#[cfg(feature = "cuda")]
pub use backend::cuda::{
    chain_bench, decode_cluster_capacity, flashinfer_prefill_bench, kernel_launches, ChainShape,
    ChainTimes, CudaBackend, CudaConfig, DecodeAttention, DecodeForm, KernelLaunch, KernelStamp,
    PrefillKv, SkipOps, SmShare, SplitPrefill, KERNEL_UNITS, PROBE_STAGES, PROBE_STAGE_NAMES,
};
pub use backend::{
    lose_device_after_from_env, Backend, DeviceTensor, Keep, Rows, SampleRow, SimulatedLoss,
};
pub use batch::{ForwardBatch, SeqChunk};
pub use error::RuntimeError;
pub use kv::{BlockTables, KvDtype, KvLayout, StateLayout, TableEdit};
pub use model::{Arch, LayerKind, LinearAttnConfig, Model, ModelConfig, Shard, Workspace};

pub type Result<T> = std::result::Result<T, RuntimeError>;
