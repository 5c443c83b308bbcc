//! The backend boundary: the ops a decoder layer needs, written once in model
//! code and implemented per device. Activations are `[rows, cols]` matrices
//! (one row per token); weights stay in their stored type (quantized or float);
//! the KV cache is the paged layout of [`crate::kv`].
//!
//! Contract for implementors (Backend v2):
//! - **No allocation inside a step.** Every op writes into an output the caller owns
//!   (a [`crate::Workspace`] buffer allocated once by [`Backend::alloc`] and reshaped per
//!   step within its capacity with [`DeviceTensor::set_shape`]).
//! - **Fallible.** Ops return `Result`; a device may report errors late, so
//!   [`Backend::synchronize`] returns the first error of work queued so far.
//! - **Rows are independent.** A row's result never depends on the other rows of the
//!   batch (their number, values or order): how each backend keeps that is its own
//!   business (the CPU backend: a fixed arithmetic path per row kind).
//! - `prepare_batch` is called once per forward pass and carries everything
//!   per-pass (positions, rope tables, block tables) to the device, so per-layer
//!   ops take no host-side metadata.
//! - `attention` first writes the pass's K/V rows into the cache slots given by
//!   the block tables, then computes causal attention of each token over its
//!   sequence's positions `0..=pos`.
//! - 8-bit (Q8, Fp8) K rows are stored minus the layer's K offset (given to `alloc_kv`):
//!   `q8(k - c[layer][kv head])`, quantized as [`crate::kv::q8`] says, and attention
//!   scores use the dequantized `k - c` as is (softmax makes that exact, see
//!   [`crate::kv`]). Exported 8-bit blocks hold `k - c`, the same on every backend.
//! - Ops are deterministic for the same inputs and batch composition.
//! - Hybrid models (v3): the KV pool also holds the recurrent-state slots of its
//!   layout's [`crate::kv::StateLayout`]; the DeltaNet ops (`causal_conv1d_silu`,
//!   `gated_delta_rule`) read each chunk's state from its `state_slot` (zero for a chunk
//!   at position 0) and leave the state after the chunk's last token there. Slots are
//!   copied, exported and imported in batches like blocks. A backend without these ops
//!   says so in [`Backend::supports_linear_attention`] and `Model::load` refuses hybrid
//!   models on it.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod loss;
mod views;

pub use loss::{lose_device_after_from_env, SimulatedLoss};

use std::sync::Arc;

use inferd_formats::TensorSource;

use inferd_core::sampling::{Extra, Sampled, Sampler};

use crate::batch::ForwardBatch;
use crate::kv::KvLayout;
use crate::model::{LinearAttnConfig, Shard};
use crate::{Result, RuntimeError};

/// Tokens per chunk of the delta rule's chunked form; chunks start at absolute positions
/// that are multiples of it (transformers' and fla's chunk size).
pub const DELTA_CHUNK: usize = 64;

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

/// How precisely a product of [`Backend::linear`] must be kept for what reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// In f32: it joins the residual stream, or it is the logits.
    F32,
    /// In bf16 or wider, at the backend's choice: what reads it rounds all it makes from it
    /// to bf16 (SwiGLU's activation, the attention's q and the K/V of a bf16 or 8-bit pool).
    /// A backend keeps f32 where its attention reads f32 K/V.
    Bf16,
}

/// Where a pass's new K/V rows of an attention layer are when [`Backend::attention`] runs.
pub enum NewKv<'a, T> {
    /// In these tensors, k and v `[n, n_kv_heads·head_dim]`: `attention` stores them in
    /// the pool first.
    Rows(&'a T, &'a T),
    /// Already in the pool at the batch's slots: [`Backend::qkv_prep`] stored them.
    Stored,
}

/// What [`Backend::qkv_prep`] did with the new K/V rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvRows {
    /// Left in its `k` and `v` outputs.
    InTensors,
    /// Stored in the pool layer it was given (its `k` and `v` outputs may be unwritten).
    Stored,
}

/// An activation buffer on a backend's device: `[rows, cols]`, row-major, with a fixed
/// capacity in elements; the shape may change per step within it.
pub trait DeviceTensor: Send + Sync {
    fn rows(&self) -> usize;
    fn cols(&self) -> usize;
    /// Elements the buffer holds at most.
    fn capacity(&self) -> usize;
    /// Reshapes to `[rows, cols]` (contents unspecified); a shape past the capacity is a
    /// `RuntimeError::BadBatch` (the caller grows its workspace outside the step).
    fn set_shape(&mut self, rows: usize, cols: usize) -> Result<()>;
}

pub trait Backend: Send + Sync {
    /// Activations: `[rows, cols]`, f32 semantics.
    type Tensor: DeviceTensor;
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

    /// Free memory of the device, in bytes, for backends whose buffers live apart from
    /// host memory (a GPU); `None` for the CPU (whose KV budget is of host memory).
    fn free_memory(&self) -> Option<u64> {
        None
    }

    /// Counts of the backend's own events since it started, for metrics (the CUDA
    /// backend: decode passes run eagerly, captured into graphs, replayed).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Waits for the work queued so far; its first error, if any.
    fn synchronize(&self) -> Result<()>;

    /// `Err(RuntimeError::DeviceLost)` when the device can run no more work in this
    /// process, without waiting for it. An op's error does not always say so itself (a
    /// library's status code after a GPU fault), so the caller asks here after one.
    fn check_device(&self) -> Result<()> {
        Ok(())
    }

    /// The slice of the model this backend computes: rank `r` of a tensor-parallel group of
    /// `w` backends ([`crate::model::Shard`]), or the whole model alone (the default).
    /// [`crate::Model::load`] loads that slice.
    fn shard(&self) -> Shard {
        Shard::WHOLE
    }

    /// Sums `x` (`[rows, cols]`, the same shape on every rank) over the group in place:
    /// each rank ends with the same sum, bit for bit. Every rank must call it for each
    /// pass's same ops in the same order (the decoder does, after the attention output
    /// and the feed-forward's down projection of a split model); never called on a backend
    /// alone, whose default refuses it.
    fn all_reduce(&self, x: &mut Self::Tensor) -> Result<()> {
        let _ = x;
        Err(RuntimeError::Other(format!(
            "the {} backend has no tensor-parallel group",
            self.name()
        )))
    }

    /// A buffer of `capacity` elements, shaped `[0, 0]` (workspace set-up, outside steps).
    fn alloc(&self, capacity: usize) -> Result<Self::Tensor>;

    /// Loads a weight. Several names are concatenated along rows (fused
    /// projections, e.g. Q|K|V); they must share dtype and trailing dimensions.
    fn load_weight(&self, src: &SharedSource, names: &[&str]) -> Result<Self::Weight>;
    /// Loads tensor `name`, whatever its rank, as a vector of its values in row-major
    /// order, in f32, each plus `add` (a zero-centred norm's `1 + w`; a convolution's
    /// `[channels, 1, taps]` kernel as `[channels * taps]`).
    fn load_vector(&self, src: &SharedSource, name: &str, add: f32) -> Result<Self::Weight>;
    /// A zeroed KV pool of `layout` (its dtype decides the storage; a backend refuses
    /// dtypes it does not implement with `RuntimeError::Kv`).
    ///
    /// `k_offset`: the model's K offset c, `[n_layers, n_kv_heads, head_dim]` (`None` =
    /// zero; a wrong length or a non-finite value is a `RuntimeError::Kv`). **8-bit K rows
    /// are stored minus the layer's K offset**: a (layer, kv head, token) K row k is
    /// stored as `q8(k - c[layer][head])` and attention uses the dequantized `k - c` as
    /// it is, with no correction (exact: see [`crate::kv`]). F32 (and F16) K, and V of
    /// every dtype, are stored as they are. Blocks exported from a pool are only
    /// meaningful in a pool with the same offset (same model: it is a function of the
    /// weights, see `Model::k_offset`).
    fn alloc_kv(&self, layout: &KvLayout, k_offset: Option<&[f32]>) -> Result<Self::Kv>;
    /// For each `(src, dst)` in order, copies block `src` over block `dst` in every
    /// layer: K and V values and, for 8-bit dtypes, their scales (copy-on-write of shared, partly
    /// filled blocks). `src == dst` is a no-op; an id outside the pool is a
    /// `RuntimeError::Kv` (nothing is copied then).
    fn copy_blocks(&self, kv: &mut Self::Kv, copies: &[(u32, u32)]) -> Result<()>;
    /// Serializes `blocks` into `out`, which must be exactly `blocks.len()` ×
    /// [`KvLayout::block_bytes`] long, one image after the other: the little-endian
    /// image documented there (per layer K values, K scales, V values, V scales; scales
    /// only for 8-bit dtypes). The image is stable (it is written to disk) and the same on every
    /// backend.
    fn export_blocks(&self, kv: &Self::Kv, blocks: &[u32], out: &mut [u8]) -> Result<()>;
    /// The inverse of [`Backend::export_blocks`]: overwrites `blocks` from `data` (their
    /// images in order). A wrong length or a block outside the pool is a
    /// `RuntimeError::Kv` (nothing is written then).
    fn import_blocks(&self, kv: &mut Self::Kv, blocks: &[u32], data: &[u8]) -> Result<()>;
    /// Whether the backend runs Gated DeltaNet layers (the ops below and the state
    /// slots); `Model::load` refuses hybrid models on a backend that does not.
    fn supports_linear_attention(&self) -> bool {
        false
    }
    /// For each `(src, dst)` in order, copies recurrent-state slot `src` over `dst` in
    /// every linear layer, conv and delta state (snapshot: running → snapshot slot;
    /// restore: the reverse). `src == dst` is a no-op; a slot outside the pool is a
    /// `RuntimeError::Kv` (nothing is copied then).
    fn copy_state_slots(&self, _kv: &mut Self::Kv, _copies: &[(u32, u32)]) -> Result<()> {
        Err(linear_attention_unsupported(self.name()))
    }
    /// Serializes state `slots` into `out`, exactly `slots.len()` ×
    /// [`crate::kv::StateLayout::slot_bytes`] long, one image after the other (the
    /// little-endian image documented there; the same on every backend).
    fn export_state_slots(&self, _kv: &Self::Kv, _slots: &[u32], _out: &mut [u8]) -> Result<()> {
        Err(linear_attention_unsupported(self.name()))
    }
    /// The inverse of [`Backend::export_state_slots`]. A wrong length or a slot outside
    /// the pool is a `RuntimeError::Kv` (nothing is written then).
    fn import_state_slots(&self, _kv: &mut Self::Kv, _slots: &[u32], _data: &[u8]) -> Result<()> {
        Err(linear_attention_unsupported(self.name()))
    }
    /// A pass's metadata, prepared once for all its layers. `batch`'s table edits are
    /// applied to `kv`'s block tables first (all of them or, if one is bad, none), then
    /// the pass is checked against the tables as they are now: a pass refused after
    /// that keeps its edits applied.
    fn prepare_batch(
        &self,
        batch: &ForwardBatch,
        rope: &RopeConfig,
        attn: &AttnConfig,
        layout: &KvLayout,
        kv: &mut Self::Kv,
    ) -> Result<Self::Batch>;

    /// Token rows and logits rows a pass of `batch` occupies in the workspace. A backend
    /// that pads passes to fixed sizes (the CUDA backend pads decode passes to its graph
    /// buckets) says so here; padding rows come after the batch's own, and their logits
    /// rows too. `_attn`, `_layout`: the model's attention and the pool the pass runs over.
    fn pass_rows(
        &self,
        batch: &ForwardBatch,
        _attn: &AttnConfig,
        _layout: &KvLayout,
    ) -> (usize, usize) {
        (batch.n_tokens(), batch.logits_rows.len())
    }

    /// Runs one pass's ops `f` (the decoder over `kv`, writing the workspace of generation
    /// `ws_generation`). A graph backend captures a decode pass on the first use of its
    /// shape and replays the capture after, for the same workspace and pool. `f` may be
    /// called twice: a capture that broke (nothing in it ran) is followed by the pass run
    /// eagerly, so `f` only queues work on the device.
    fn run_pass(
        &self,
        _batch: &Self::Batch,
        kv: &mut Self::Kv,
        _ws_generation: u64,
        mut f: impl FnMut(&mut Self::Kv) -> Result<()>,
    ) -> Result<()> {
        f(kv)
    }

    /// Rows of `table` for the batch's tokens.  -> out [n_tokens, hidden]
    fn embed(
        &self,
        table: &Self::Weight,
        batch: &Self::Batch,
        out: &mut Self::Tensor,
    ) -> Result<()>;
    /// `x / rms(x) * w` per row.  x [n, d] -> out [n, d]
    fn rms_norm(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        eps: f32,
        out: &mut Self::Tensor,
    ) -> Result<()>;
    /// The residual step fused with the next norm: `x += y`, then `out = rms_norm(x)`.
    fn add_rms_norm(
        &self,
        x: &mut Self::Tensor,
        y: &Self::Tensor,
        w: &Self::Weight,
        eps: f32,
        out: &mut Self::Tensor,
    ) -> Result<()>;
    /// RMSNorm of every `head_dim` slice of each row, in place, with one shared `w` of
    /// `[head_dim]` (Qwen3 QK-norm).
    fn head_rms_norm(
        &self,
        x: &mut Self::Tensor,
        w: &Self::Weight,
        head_dim: usize,
        eps: f32,
    ) -> Result<()>;
    /// `x · wᵀ (+ bias)`.  x [n, in] -> out [n, out]
    ///
    /// `rows` says which rows of `batch` `x` holds, so the backend computes each row on
    /// the fixed path of its kind (prompt or generated, see [`crate::SeqChunk::prompt_len`]):
    /// a row's result never depends on the rest of the batch. `keep`: how precisely the
    /// product must be stored for what reads it.
    #[allow(clippy::too_many_arguments)]
    fn linear(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        bias: Option<&Self::Weight>,
        batch: &Self::Batch,
        rows: Rows,
        keep: Keep,
        out: &mut Self::Tensor,
    ) -> Result<()>;
    /// A product joining the residual stream, and the norm after it: `x += a · wᵀ (+ bias)`,
    /// then `out = rms_norm(x) · norm.0` (eps `norm.1`). `y` [n, d] is scratch where a
    /// backend makes the product apart (the default: `linear`, then `add_rms_norm`).
    ///   a [n, in] -> x [n, d] (updated), out [n, d]
    #[allow(clippy::too_many_arguments)]
    fn linear_add_rms_norm(
        &self,
        a: &Self::Tensor,
        w: &Self::Weight,
        bias: Option<&Self::Weight>,
        batch: &Self::Batch,
        x: &mut Self::Tensor,
        norm: (&Self::Weight, f32),
        y: &mut Self::Tensor,
        out: &mut Self::Tensor,
    ) -> Result<()> {
        self.linear(a, w, bias, batch, Rows::Tokens, Keep::F32, y)?;
        self.add_rms_norm(x, y, norm.0, norm.1, out)
    }
    /// Splits the columns of `x` into `outs`, consecutive pieces as wide as each is.
    fn split_cols(&self, x: &Self::Tensor, outs: &mut [&mut Self::Tensor]) -> Result<()>;
    /// Rotates the first `rotary_dim` of every `head_dim` slice by each token's position.
    fn rope(&self, x: &mut Self::Tensor, head_dim: usize, batch: &Self::Batch) -> Result<()>;
    /// Stores K/V of this pass in layer `layer` of `kv` (unless `qkv_prep` did:
    /// [`NewKv::Stored`]), then causal GQA attention.
    /// q: [n, n_heads*head_dim], k, v: [n, n_kv_heads*head_dim] -> out [n, n_heads*head_dim]
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        q: &Self::Tensor,
        new: NewKv<'_, Self::Tensor>,
        kv: &mut Self::Kv,
        layer: usize,
        batch: &Self::Batch,
        cfg: &AttnConfig,
        out: &mut Self::Tensor,
    ) -> Result<()>;
    /// Splits every `2 * head_dim` slice of each row into its halves: the first into
    /// `a`, the second into `b` (Qwen3.5's Q projection: each head's query, then its
    /// output gate).  x [n, heads * 2 * head_dim] -> a, b [n, heads * head_dim]
    fn split_head_pairs(
        &self,
        _x: &Self::Tensor,
        _head_dim: usize,
        _a: &mut Self::Tensor,
        _b: &mut Self::Tensor,
    ) -> Result<()> {
        Err(linear_attention_unsupported(self.name()))
    }
    /// The attention output gate, in place: `x *= sigmoid(gate)`.  [n, d], [n, d]
    fn sigmoid_mul(&self, _x: &mut Self::Tensor, _gate: &Self::Tensor) -> Result<()> {
        Err(linear_attention_unsupported(self.name()))
    }
    /// The causal depthwise convolution of a Gated DeltaNet over Q|K|V, then SiLU:
    /// `out[t][c] = silu(Σ_i w[c][i] · x[t - (taps-1) + i][c])`, where rows before a
    /// chunk's first token come from its state slot's conv state in state layer
    /// `layer` (zeros for a chunk at position 0); the slot keeps the chunk's last
    /// `taps - 1` input rows after.  x [n, conv_dim], w [conv_dim * taps] -> out [n, conv_dim]
    #[allow(clippy::too_many_arguments)]
    fn causal_conv1d_silu(
        &self,
        _x: &Self::Tensor,
        _w: &Self::Weight,
        _kv: &mut Self::Kv,
        _layer: usize,
        _batch: &Self::Batch,
        _cfg: &LinearAttnConfig,
        _out: &mut Self::Tensor,
    ) -> Result<()> {
        Err(linear_attention_unsupported(self.name()))
    }
    /// L2-normalizes every `head_dim` slice of each row in place, then scales it:
    /// `x · rsqrt(Σx² + eps) · scale`.
    fn l2_norm_heads(
        &self,
        _x: &mut Self::Tensor,
        _head_dim: usize,
        _eps: f32,
        _scale: f32,
    ) -> Result<()> {
        Err(linear_attention_unsupported(self.name()))
    }
    /// The DeltaNet's per-head gates: decay `g = -exp(a_log) · softplus(a + dt_bias)`
    /// (log space, ≤ 0) and `beta = sigmoid(b)`.
    /// a, b [n, n_v_heads]; a_log, dt_bias [n_v_heads] -> g, beta [n, n_v_heads]
    #[allow(clippy::too_many_arguments)]
    fn delta_gates(
        &self,
        _a: &Self::Tensor,
        _b: &Self::Tensor,
        _a_log: &Self::Weight,
        _dt_bias: &Self::Weight,
        _g: &mut Self::Tensor,
        _beta: &mut Self::Tensor,
    ) -> Result<()> {
        Err(linear_attention_unsupported(self.name()))
    }
    /// The gated delta rule of every chunk, from and into its state slot of state layer
    /// `layer` (zero for a chunk at position 0). Per value head h (key head
    /// `h / (n_v_heads / n_k_heads)`), with S `[k_head_dim, v_head_dim]`, per token:
    /// `S = exp(g)·S; S += k ⊗ (beta·(v - Sᵀk)); o = Sᵀq`. A prompt piece runs in the
    /// chunked parallel form over chunks of [`DELTA_CHUNK`] tokens at fixed absolute
    /// positions (multiples of it; a piece starting inside one first finishes it); a
    /// one-token chunk (decode) runs the recurrent step.
    /// q, k [n, n_k_heads * k_head_dim] (normalized, q scaled), v [n, value_dim],
    /// g, beta [n, n_v_heads] -> out [n, value_dim]
    #[allow(clippy::too_many_arguments)]
    fn gated_delta_rule(
        &self,
        _q: &Self::Tensor,
        _k: &Self::Tensor,
        _v: &Self::Tensor,
        _g: &Self::Tensor,
        _beta: &Self::Tensor,
        _kv: &mut Self::Kv,
        _layer: usize,
        _batch: &Self::Batch,
        _cfg: &LinearAttnConfig,
        _out: &mut Self::Tensor,
    ) -> Result<()> {
        Err(linear_attention_unsupported(self.name()))
    }
    /// The DeltaNet's gated RMSNorm, per `head_dim` slice:
    /// `out = x · rsqrt(mean(x²) + eps) · w · silu(z)`.
    /// x, z [n, heads * head_dim], w [head_dim] -> out [n, heads * head_dim]
    fn gated_rms_norm(
        &self,
        _x: &Self::Tensor,
        _z: &Self::Tensor,
        _w: &Self::Weight,
        _head_dim: usize,
        _eps: f32,
        _out: &mut Self::Tensor,
    ) -> Result<()> {
        Err(linear_attention_unsupported(self.name()))
    }
    /// SwiGLU's gating: `silu(gate) * up`.  [n, ffn], [n, ffn] -> out [n, ffn]
    fn silu_mul(
        &self,
        gate: &Self::Tensor,
        up: &Self::Tensor,
        out: &mut Self::Tensor,
    ) -> Result<()>;
    /// Full attention's inputs from its fused projection: `qkv` split into q, k and v,
    /// every head of q and k RMS-normed by `norms` (Qwen3's QK-norm, `(q, k)` weights of
    /// `[head_dim]`) and rotated by its token's position.
    /// qkv [n, (n_heads + 2·n_kv_heads)·head_dim] -> q [n, n_heads·head_dim],
    /// k, v [n, n_kv_heads·head_dim]
    ///
    /// With `store` (a pool and its layer), a backend may also store k and v there, as
    /// `attention` would, and say so ([`KvRows::Stored`]); then `attention` gets
    /// [`NewKv::Stored`].
    ///
    /// The default composes `split_cols`, `head_rms_norm` and `rope`, and leaves k and v in
    /// their tensors; a backend may fuse them with the same arithmetic.
    #[allow(clippy::too_many_arguments)]
    fn qkv_prep(
        &self,
        qkv: &Self::Tensor,
        cfg: &AttnConfig,
        norms: Option<(&Self::Weight, &Self::Weight)>,
        eps: f32,
        batch: &Self::Batch,
        _store: Option<(&mut Self::Kv, usize)>,
        q: &mut Self::Tensor,
        k: &mut Self::Tensor,
        v: &mut Self::Tensor,
    ) -> Result<KvRows> {
        let n = qkv.rows();
        q.set_shape(n, cfg.n_heads * cfg.head_dim)?;
        k.set_shape(n, cfg.n_kv_heads * cfg.head_dim)?;
        v.set_shape(n, cfg.n_kv_heads * cfg.head_dim)?;
        self.split_cols(qkv, &mut [&mut *q, &mut *k, &mut *v])?;
        if let Some((qn, kn)) = norms {
            self.head_rms_norm(q, qn, cfg.head_dim, eps)?;
            self.head_rms_norm(k, kn, cfg.head_dim, eps)?;
        }
        self.rope(q, cfg.head_dim, batch)?;
        self.rope(k, cfg.head_dim, batch)?;
        Ok(KvRows::InTensors)
    }
    /// SwiGLU's gating from the fused gate|up projection: `silu(gate) * up`, `gate` and
    /// `up` being scratch a backend may use for the halves (the default splits into them).
    /// gate_up [n, 2·ffn] -> out [n, ffn]
    fn swiglu(
        &self,
        gate_up: &Self::Tensor,
        gate: &mut Self::Tensor,
        up: &mut Self::Tensor,
        out: &mut Self::Tensor,
    ) -> Result<()> {
        let (n, ffn) = (gate_up.rows(), gate_up.cols() / 2);
        gate.set_shape(n, ffn)?;
        up.set_shape(n, ffn)?;
        self.split_cols(gate_up, &mut [&mut *gate, &mut *up])?;
        self.silu_mul(gate, up, out)
    }
    /// The feed-forward's gating from its fused gate|up weight `w` [2·ffn, in]: `proj =
    /// h · wᵀ (+ bias)` (stored for a bf16 reader), then `swiglu` of it into `out`. A
    /// backend may make both in one kernel, `proj` then left as scratch (the default: the
    /// two ops).  h [n, in] -> out [n, ffn]
    #[allow(clippy::too_many_arguments)]
    fn linear_swiglu(
        &self,
        h: &Self::Tensor,
        w: &Self::Weight,
        bias: Option<&Self::Weight>,
        batch: &Self::Batch,
        proj: &mut Self::Tensor,
        gate: &mut Self::Tensor,
        up: &mut Self::Tensor,
        out: &mut Self::Tensor,
    ) -> Result<()> {
        self.linear(h, w, bias, batch, Rows::Tokens, Keep::Bf16, proj)?; // [n, 2·ffn]
        self.swiglu(proj, gate, up, out)
    }
    fn add_assign(&self, x: &mut Self::Tensor, y: &Self::Tensor) -> Result<()>;
    /// The rows named by the batch's `logits_rows`.  x [n, cols] -> out [n_logits, cols]
    fn gather_logit_rows(
        &self,
        x: &Self::Tensor,
        batch: &Self::Batch,
        out: &mut Self::Tensor,
    ) -> Result<()>;
    /// Copies `x` to host memory, row-major, into `out` (resized to fit).
    fn to_host(&self, x: &Self::Tensor, out: &mut Vec<f32>) -> Result<()>;
    /// Writes host values (row-major `[rows, cols]`, f32) into `out`, within its capacity:
    /// the reverse of `to_host`, for inputs made on the host (tests, tools).
    fn from_host(
        &self,
        data: &[f32],
        rows: usize,
        cols: usize,
        out: &mut Self::Tensor,
    ) -> Result<()>;
    /// Draws each row's next token from its row of `logits` (`[n_logits, vocab]`) as its
    /// sampler says (greedy, temperature, top-k/top-p/min-p, penalties, DRY, the grammar
    /// mask, seeded PRNG) and reports the logprobs asked for: `out[i]` is `rows[i]`'s.
    /// Only token ids and logprobs leave the device. A row's draw depends on its own
    /// logits, history and sampler only. [`Backend::sample_start`] then
    /// [`Backend::sample_finish`].
    fn sample(
        &self,
        logits: &Self::Tensor,
        rows: &mut [SampleRow<'_>],
        out: &mut Vec<Sampled>,
    ) -> Result<()> {
        self.sample_start(logits, rows)?;
        self.sample_finish(out)
    }

    /// The first half of [`Backend::sample`]: queues the draws (the PRNG and the histories
    /// are read now) and returns, per row, its token where the host knows it already
    /// (`None`: on the device, where a later pass can read it through
    /// [`ForwardBatch::drawn`] before [`Backend::sample_finish`] has brought it back). One
    /// sample op is queued at a time.
    fn sample_start(
        &self,
        logits: &Self::Tensor,
        rows: &mut [SampleRow<'_>],
    ) -> Result<Vec<Option<u32>>>;

    /// Waits for the draws `sample_start` queued (and for nothing queued after them) and
    /// reports them: `out[i]` is row `i`'s.
    fn sample_finish(&self, out: &mut Vec<Sampled>) -> Result<()>;

    /// Whether ops only queue work for a device that runs it later (a GPU): the engine
    /// then queues a step before the previous one has come back.
    fn queues_work(&self) -> bool {
        false
    }
}

/// `from_host`'s argument check: `data` holds exactly `rows × cols` values.
pub(crate) fn check_host_shape(data: &[f32], rows: usize, cols: usize) -> Result<()> {
    if data.len() != rows * cols {
        return Err(crate::RuntimeError::BadBatch(format!(
            "from_host: {} values for a {rows} x {cols} tensor",
            data.len()
        )));
    }
    Ok(())
}

/// One sequence's sampling in a step: which logits row is its, its sampler (parameters,
/// PRNG state, scratch) and the history and constraints it reads.
pub struct SampleRow<'a> {
    /// Its row of the pass's logits.
    pub row: usize,
    pub sampler: &'a mut Sampler,
    pub prompt: &'a [u32],
    pub generated: &'a [u32],
    /// The grammar mask and the DRY breakers.
    pub extra: Extra<'a>,
}

/// The gated delta rule's inputs for a pass of `n` tokens, as every backend checks them
/// before it runs the op: q, k [n, key_dim], v [n, value_dim], g, beta [n, n_v_heads],
/// state slots of `delta_elems` (the DeltaNet's), value heads grouped over key heads.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_delta_rule_inputs<T: DeviceTensor>(
    n: usize,
    q: &T,
    k: &T,
    v: &T,
    g: &T,
    beta: &T,
    delta_elems: usize,
    cfg: &LinearAttnConfig,
) -> Result<()> {
    let shapes = [
        (q, cfg.key_dim()),
        (k, cfg.key_dim()),
        (v, cfg.value_dim()),
        (g, cfg.n_v_heads),
        (beta, cfg.n_v_heads),
    ];
    if shapes.iter().any(|(t, c)| t.rows() != n || t.cols() != *c)
        || delta_elems != cfg.delta_state_elems()
        || cfg.n_k_heads == 0
        || !cfg.n_v_heads.is_multiple_of(cfg.n_k_heads)
    {
        return Err(RuntimeError::BadBatch(
            "gated_delta_rule: inputs do not match the DeltaNet geometry".into(),
        ));
    }
    Ok(())
}

/// What a backend without Gated DeltaNet layers answers to their ops (`Model::load` refuses
/// hybrid models on it first, so a caller sees this only by calling the ops directly).
pub(crate) fn linear_attention_unsupported(backend: &str) -> RuntimeError {
    RuntimeError::Device(format!(
        "Gated DeltaNet (linear-attention) layers and recurrent-state slots are not \
         implemented on the {backend} backend yet: run hybrid models on the CPU backend"
    ))
}
