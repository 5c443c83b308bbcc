//! The backend boundary: the ops a decoder layer needs, written once in model
//! code and implemented per device. Activations are `[rows, cols]` matrices
//! (one row per token); weights stay in their stored type (quantized or float);
//! the KV cache is the paged layout of [`crate::kv`].
//!
//! Contract for implementors:
//! - `prepare_batch` is called once per forward pass and carries everything
//!   per-pass (positions, rope tables, block tables) to the device, so per-layer
//!   ops take no host-side metadata.
//! - `attention` first writes the pass's K/V rows into the cache slots given by
//!   the block tables, then computes causal attention of each token over its
//!   sequence's positions `0..=pos`.
//! - Q8 K rows are stored minus the layer's K offset (given to `alloc_kv`):
//!   `q8(k - c[layer][kv head])`, quantized as [`crate::kv::q8`] says, and attention
//!   scores use the dequantized `k - c` as is (softmax makes that exact, see
//!   [`crate::kv`]). Exported Q8 blocks hold `k - c`, the same on every backend.
//! - Ops are deterministic for the same inputs and batch composition.

pub mod cpu;

use std::sync::Arc;

use inferd_formats::TensorSource;

use crate::batch::ForwardBatch;
use crate::kv::KvLayout;
use crate::Result;

/// How rotary embedding pairs dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(2i, 2i+1)` (GGML's "normal" rope; GGUF Llama files are converted for it).
    Interleaved,
    /// Pairs `(i, i + rotary_dim/2)` (HF `rotate_half`; GGML "neox"; Qwen2/3 GGUF).
    Neox,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeConfig {
    pub theta: f32,
    /// Leading dimensions of each head that rotate (`head_dim` unless partial rotary).
    pub rotary_dim: usize,
    pub style: RopeStyle,
}

impl RopeConfig {
    /// Inverse frequency of rotation pair `i` (`0 <= i < rotary_dim / 2`).
    pub fn inv_freq(&self, i: usize) -> f32 {
        1.0 / self.theta.powf(2.0 * i as f32 / self.rotary_dim as f32)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnConfig {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplier of q·k (normally `1/sqrt(head_dim)`).
    pub scale: f32,
}

/// Where weights come from: a memory-mapped GGUF or safetensors model.
pub type SharedSource = Arc<dyn TensorSource>;

/// Which rows of a pass an activation matrix holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows {
    /// One row per token of the batch.
    Tokens,
    /// One row per entry of the batch's `logits_rows`.
    Logits,
}

pub trait Backend: Send + Sync {
    /// Activations: `[rows, cols]`, f32 semantics.
    type Tensor: Send + Sync;
    /// A weight matrix (linear, embedding table) or vector (norm, bias).
    type Weight: Send + Sync;
    /// The paged KV pool of all layers.
    type Kv: Send + Sync;
    /// Per-pass metadata on the device.
    type Batch: Send + Sync;

    fn name(&self) -> &'static str;

    /// Runs one forward pass's host-side orchestration `f` in the backend's
    /// execution context (the CPU backend: inside its worker pool, so nested
    /// parallel ops start without waking threads from outside).
    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        f()
    }

    /// Loads a weight. Several names are concatenated along rows (fused
    /// projections, e.g. Q|K|V); they must share dtype and trailing dimensions.
    fn load_weight(&self, src: &SharedSource, names: &[&str]) -> Result<Self::Weight>;
    /// A zeroed KV pool of `layout` (its dtype decides the storage; a backend refuses
    /// dtypes it does not implement with `RuntimeError::Kv`).
    ///
    /// `k_offset`: the model's K offset c, `[n_layers, n_kv_heads, head_dim]` (`None` =
    /// zero; a wrong length or a non-finite value is a `RuntimeError::Kv`). **Q8 K rows
    /// are stored minus the layer's K offset**: a (layer, kv head, token) K row k is
    /// stored as `q8(k - c[layer][head])` and attention uses the dequantized `k - c` as
    /// it is, with no correction (exact: see [`crate::kv`]). F32 (and F16) K, and V of
    /// every dtype, are stored as they are. Blocks exported from a pool are only
    /// meaningful in a pool with the same offset (same model: it is a function of the
    /// weights, see `Model::k_offset`).
    fn alloc_kv(&self, layout: &KvLayout, k_offset: Option<&[f32]>) -> Result<Self::Kv>;
    /// Copies block `src` over block `dst` in every layer: K and V values and, for Q8,
    /// their scales (copy-on-write of a shared, partly filled block). `src == dst` is a
    /// no-op; an id outside the pool is a `RuntimeError::Kv`.
    fn copy_block(&self, kv: &mut Self::Kv, src: u32, dst: u32) -> Result<()>;
    /// Serializes block `block` of every layer into `out`, which must be exactly
    /// [`KvLayout::block_bytes`] long: the little-endian image documented there (per
    /// layer K values, K scales, V values, V scales; scales only for Q8). The image is
    /// stable (it is written to disk) and the same on every backend.
    fn export_block(&self, kv: &Self::Kv, block: u32, out: &mut [u8]) -> Result<()>;
    /// The inverse of [`Backend::export_block`]: overwrites block `block` of every layer
    /// from `data`. A wrong length or a block outside the pool is a `RuntimeError::Kv`
    /// (nothing is written then).
    fn import_block(&self, kv: &mut Self::Kv, block: u32, data: &[u8]) -> Result<()>;
    fn prepare_batch(
        &self,
        batch: &ForwardBatch,
        rope: &RopeConfig,
        kv: &KvLayout,
    ) -> Result<Self::Batch>;

    /// Rows of `table` for the batch's tokens.  -> [n_tokens, hidden]
    fn embed(&self, table: &Self::Weight, batch: &Self::Batch) -> Self::Tensor;
    /// `x / rms(x) * w` per row.
    fn rms_norm(&self, x: &Self::Tensor, w: &Self::Weight, eps: f32) -> Self::Tensor;
    /// RMSNorm of every `head_dim` slice of each row, with one shared `w` of `[head_dim]` (Qwen3 QK-norm).
    fn head_rms_norm(&self, x: &mut Self::Tensor, w: &Self::Weight, head_dim: usize, eps: f32);
    /// `x · wᵀ (+ bias)`.  [n, in] -> [n, out]
    ///
    /// `rows` says which rows of `batch` `x` holds, so the backend computes each row on
    /// the fixed path of its kind (prompt or generated, see [`crate::SeqChunk::prompt_len`]):
    /// a row's result never depends on the rest of the batch.
    fn linear(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        bias: Option<&Self::Weight>,
        batch: &Self::Batch,
        rows: Rows,
    ) -> Self::Tensor;
    /// Splits columns into consecutive pieces of the given widths.
    fn split_cols(&self, x: &Self::Tensor, widths: &[usize]) -> Vec<Self::Tensor>;
    /// Rotates the first `rotary_dim` of every `head_dim` slice by each token's position.
    fn rope(&self, x: &mut Self::Tensor, head_dim: usize, batch: &Self::Batch);
    /// Stores K/V of this pass in layer `layer` of `kv`, then causal GQA attention.
    /// q: [n, n_heads*head_dim], k, v: [n, n_kv_heads*head_dim] -> [n, n_heads*head_dim]
    fn attention(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        kv: &mut Self::Kv,
        layer: usize,
        batch: &Self::Batch,
        cfg: &AttnConfig,
    ) -> Self::Tensor;
    /// SwiGLU's gating: `silu(gate) * up`.  [n, ffn], [n, ffn] -> [n, ffn]
    fn silu_mul(&self, gate: &Self::Tensor, up: &Self::Tensor) -> Self::Tensor;
    fn add_assign(&self, x: &mut Self::Tensor, y: &Self::Tensor);
    /// The rows named by the batch's `logits_rows`.  -> [n_logits, cols]
    fn gather_logit_rows(&self, x: &Self::Tensor, batch: &Self::Batch) -> Self::Tensor;
    /// Moves (or copies) to host memory, row-major.
    fn into_host(&self, x: Self::Tensor) -> Vec<f32>;
}
