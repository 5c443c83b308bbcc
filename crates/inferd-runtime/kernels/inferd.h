// The C ABI between inferd's CUDA backend (Rust, src/backend/cuda/ffi.rs) and its
// kernels. Every function returns a cudaError_t as int (0 = success) and queues its
// work on `stream` (asynchronous unless it says otherwise). Device pointers are plain
// pointers; activations are row-major. Keep this file and ffi.rs in step.
#pragma once
#include <cstddef>
#include <cstdint>

extern "C" {
// ---- runtime.cu: devices, memory, streams
int ifd_device_count(int* n);
int ifd_set_device(int dev);
// name: NUL-terminated, at most `len` bytes with the NUL.
int ifd_device_info(int dev, char* name, int len, int* major, int* minor, int* sms,
                    size_t* total_bytes);
int ifd_mem_info(size_t* free_bytes, size_t* total_bytes);
int ifd_stream_create(void** stream);
int ifd_stream_destroy(void* stream);
// Blocks until the stream's work is done; its first error.
// cudaStreamQuery: 0 when its work is done, 600 (not ready) while it runs, or the
// device's sticky error once it is lost; never waits.
int ifd_stream_query(void* stream);
int ifd_stream_sync(void* stream);
int ifd_malloc(void** ptr, size_t bytes);
int ifd_free(void* ptr);
int ifd_host_alloc(void** ptr, size_t bytes);
int ifd_host_free(void* ptr);
// Any direction (unified addressing); pageable host memory is staged by the driver.
int ifd_copy(void* dst, const void* src, size_t bytes, void* stream);
int ifd_memset(void* ptr, int value, size_t bytes, void* stream);
// The error of the last launch on this thread (and clears it).
int ifd_last_error();
// Test support: queues a kernel that stores to an invalid address, so the work after it
// fails with a sticky error (cudaErrorIllegalAddress: the device is lost to the process).
int ifd_test_fault(void* stream);
// Test support: queries `stream` while it is being captured, which the runtime forbids:
// the capture is invalidated, as another thread's device-wide call would do.
void ifd_test_break_capture(void* stream);
// CUDA graphs: capture the work queued on `stream` between begin and end (this thread's
// calls only) into an executable graph; launch replays it on `stream`.
int ifd_capture_begin(void* stream);
// Ends the capture and instantiates it into *exec (null when the capture failed).
int ifd_capture_end(void* stream, void** exec);
int ifd_graph_launch(void* exec, void* stream);
int ifd_graph_destroy(void* exec);
const char* ifd_error_string(int err);
// Nsight Compute's capture range (ncu --profile-from-start off): on = 1 starts it, 0 ends.
int ifd_profiler(int on);

// ---- elementwise.cu
// out[t, :] = table[tokens[t], :]   table bf16 [vocab, cols] -> out f32 [n, cols]
int ifd_embed(const void* table, const int32_t* tokens, int n, int cols, float* out,
              void* stream);
// out = silu(gate) * up   f32 [n] x2 -> bf16 [n]
int ifd_silu_mul(const float* gate, const float* up, size_t n, void* out, void* stream);
// x += y   f32 [n]
int ifd_add(float* x, const float* y, size_t n, void* stream);
// out[r, c] = x[r, col0 + c]   x f32 [rows, x_cols] -> out f32 [rows, width]
int ifd_copy_cols(const float* x, int rows, int x_cols, int col0, int width, float* out,
                  void* stream);
// out[i, :] = x[idx[i], :]   x f32 [*, cols] -> out f32 [n, cols]
int ifd_gather_rows(const float* x, const int32_t* idx, int n, int cols, float* out,
                    void* stream);

// ---- gemv.cu: y = x · wᵀ (+ bias) for n <= 8 rows, each row summed in a fixed order
// x bf16 [n, k], w bf16 [out, k], bias f32 [out] or null -> y f32 [n, out]; k % 8 == 0;
// `loads`: 16-byte loads of w each lane keeps in flight (4, 8 or 16; fewer for more rows);
// `add`: y += the product (a residual stream) instead of y = it
int ifd_gemv(const void* x, const void* w, const float* bias, float* y, int n, int k, int out,
             int loads, int add, void* stream);
// SwiGLU of a fused gate|up product in the product's kernel: w bf16 [2f, k] (gate rows,
// then up rows), bias f32 [2f] or null -> out bf16 [n, f] = silu(x·gateᵀ + b) ⊙ (x·upᵀ + b),
// the bits of ifd_gemv then ifd_swiglu on its f32 output; n <= 8
int ifd_gemv_swiglu(const void* x, const void* w, const float* bias, void* out, int n, int k,
                    int f, int loads, void* stream);

// ---- chain.cu: a chain of one-row products in one persistent kernel, y_s = w_s · x_s,
// where x_s f32 [k] (read rounded to bf16) is written by earlier steps: step s starts once
// every block is done with step s - 1. w bf16 [out, k] (k % 8 == 0), y f32 [out] (`add`:
// y += the product). steps: DEVICE [n_steps]; counters: DEVICE u32 [2 n_steps], zero at
// launch; max_k: the widest k; piece: 4096 or 8192 bytes a bulk copy, `stages` (1-16) in
// flight a warp. Each row's sum is gemv.cu's, bit for bit. wait 0: no step waits for the
// one before (measurement only: the ring's stream alone; x is then read as it is written).
typedef struct IfdChainStep {
  const void* w;
  const float* x;
  float* y;
  int k, out, add, pad;
} IfdChainStep;
int ifd_chain(const IfdChainStep* steps, int n_steps, int stages, int piece, int max_k,
              unsigned* counters, int wait, void* stream);
// Measurement only (chain_bench.cu): `layers` layers of the products of a one-row decode
// step (hidden -> qkv_out, hidden -> hidden, hidden -> gate_up, gate_up / 2 -> hidden),
// each step's x the step before's y, on random weights: ms a chain by gemv.cu's kernel in a
// CUDA graph, alone (x fixed) and with each x rounded from the y before (a kernel a step);
// by ifd_chain at each (stages, piece) of the lists; a device copy's TB/s (bytes read and
// written); and the largest |difference| of ifd_chain's outputs from gemv.cu's.
// res: [wave ms, wave + rounding ms, copy TB/s, max |diff|, the first config's ms with no
// waits between steps, chain ms of each config...]
int ifd_chain_bench(int hidden, int qkv_out, int gate_up, int layers, int iters, int n_cfg,
                    const int* stages, const int* pieces, float* res);

// ---- fused.cu
// Full attention's inputs from the fused projection qkv [rows, (hq + 2 hkv) * head_dim]
// (bf16 when qkv_bf16, else f32): q and k heads RMS-normed by q_norm / k_norm f32
// [head_dim] (null: no norm), then rotated as ifd_rope does; v copied. With kv (else null),
// the k and v heads are also stored into that layer's pool at slot[r], as ifd_kv_append
// stores them (the same bytes), so attention need not append them.
//   -> q [rows, hq * head_dim] (bf16 when q_bf16, else f32), k, v f32 [rows, hkv * head_dim]
//      (k, v null: not written)   slot: DEVICE int32 [rows]
struct IfdPaged;
int ifd_qkv_prep(const void* qkv, int qkv_bf16, int rows, int hq, int hkv, int head_dim,
                 const float* q_norm, const float* k_norm, float eps, int half, int neox,
                 const int32_t* pos, const float* cos_tab, const float* sin_tab, void* q,
                 int q_bf16, float* k, float* v, const struct IfdPaged* kv,
                 const int32_t* slot, void* stream);
// out[r, c] = silu(gate_up[r, c]) * gate_up[r, f + c]
//   gate_up [rows, 2f] (bf16 when in_bf16, else f32) -> bf16 [rows, f]
int ifd_swiglu(const void* gate_up, int in_bf16, int rows, int f, void* out, void* stream);

// ---- blocks.cu: KV blocks to and from a contiguous image (export order: per block, every
// layer's pieces: K values then V values, or for 8-bit KV K values, K scales, V values,
// V scales; piece p of a block is bytes[p] long). planes: DEVICE array [n_layers * n]
// (layer l's piece p at l * n + p); ids: DEVICE [count]; image: DEVICE [count * n_layers *
// sum(bytes)]
struct IfdPieces {
  int n;              // pieces per layer: 2 or 4
  size_t bytes[4];    // bytes of one block of each piece's plane
};
int ifd_gather_blocks(void* const* planes, int n_layers, IfdPieces pieces, const int32_t* ids,
                      int count, void* image, void* stream);
int ifd_scatter_blocks(void* const* planes, int n_layers, IfdPieces pieces, const int32_t* ids,
                       int count, const void* image, void* stream);

// ---- norm.cu: RMSNorm x / sqrt(mean(x^2) + eps) * w
// x f32 [rows, cols], w f32 [cols] -> out bf16 [rows, cols]
int ifd_rms_norm(const float* x, const float* w, int rows, int cols, float eps, void* out,
                 void* stream);
// x += y, then out = rms_norm(x)   x, y f32 [rows, cols] -> out bf16 [rows, cols]
int ifd_add_rms_norm(float* x, const float* y, const float* w, int rows, int cols, float eps,
                     void* out, void* stream);
// In place, every head_dim slice of x f32 [slices, head_dim], w f32 [head_dim].
int ifd_head_rms_norm(float* x, const float* w, int slices, int head_dim, float eps,
                      void* stream);

// ---- rope.cu: rotates the first 2*half dims of every head of x f32 [rows, cols] by
// the angle tables cos/sin f32 [max_pos, half] at positions pos [rows]; neox pairs
// (i, i + half), else (2i, 2i + 1).
int ifd_rope(float* x, int rows, int cols, int head_dim, int half, int neox,
             const int32_t* pos, const float* cos_tab, const float* sin_tab, void* stream);

// ---- attention.cu: paged KV, per layer K and V [num_blocks, n_kv, block_size, head_dim]
// of f32, bf16, or 8-bit codes (i8 or fp8 e4m3) with one f32 scale per (block, head, slot)
// row in k_scale / v_scale [num_blocks, n_kv, block_size]; 8-bit K rows are stored minus
// the layer's K offset k_offset [n_kv, head_dim] (NULL: zero). crate::kv has the formats.
enum { IFD_KV_F32 = 0, IFD_KV_BF16 = 1, IFD_KV_Q8 = 2, IFD_KV_FP8 = 3 };
struct IfdPaged {
  void* k;            // this layer's K plane
  void* v;            // this layer's V plane
  int dtype;          // IFD_KV_*
  int n_kv_heads;
  int block_size;
  int head_dim;
  float* k_scale;     // 8-bit only
  float* v_scale;     // 8-bit only
  const float* k_offset;  // 8-bit only; may be NULL
};
// Stores K/V rows of the pass: token t goes to physical slot slot[t] = block * block_size
// + offset; a negative slot (a padding row) stores nothing. 8-bit rows are quantized as
// crate::kv::q8 / fp8 do it on the host, to the same codes and scales for the same input.
// k, v f32 [n, n_kv_heads * head_dim]
int ifd_kv_append(IfdPaged kv, const float* k, const float* v, const int32_t* slot, int n,
                  void* stream);
// 8-bit layers: pages (blocks) src[0..n) dequantized to bf16 pages 0..n of k_out / v_out
// ([n, n_kv_heads, block_size, head_dim] each; head_dim a multiple of 4), what FlashInfer's
// prefill reads for an 8-bit pool.  src: DEVICE int32 [n]
int ifd_kv_dequant_pages(IfdPaged kv, const int32_t* src, int n, void* k_out, void* v_out,
                         void* stream);
// ---- kv_gather.cu: one layer's K and V of a pass's sequences, copied out of the pool
// (dequantized for 8-bit pools) into contiguous bf16 k_out / v_out [rows, n_kv_heads,
// head_dim]: sequence i's kv_len tokens from row tok_indptr[i] on, then zero rows up to
// tok_indptr[i + 1], what FlashInfer's ragged prefill (IFD_FI_RAGGED) reads. Sequence i's
// pages are pages[page_indptr[i] ..], the last holding last_page_len[i] (1..block_size) of
// its tokens; n_pages = page_indptr[n_seqs]. head_dim a multiple of 8.
// page_indptr, tok_indptr: DEVICE int32 [n_seqs + 1]; last_page_len: DEVICE int32 [n_seqs];
// pages: DEVICE int32 [n_pages]
int ifd_kv_gather(IfdPaged kv, const int32_t* page_indptr, const int32_t* pages,
                  const int32_t* last_page_len, const int32_t* tok_indptr, int n_seqs,
                  int n_pages, void* k_out, void* v_out, void* stream);
// Causal GQA attention of every token over its sequence's positions 0..=pos[t]:
// q f32 [n, n_heads * head_dim] -> out bf16 [n, n_heads * head_dim]. Token t belongs to
// sequence seq[t], whose block table is bt[bt_off[seq[t]] ..].
int ifd_attention(IfdPaged kv, const float* q, int n, int n_heads, float scale,
                  const int32_t* seq, const int32_t* pos, const int32_t* bt_off,
                  const int32_t* bt, void* out, void* stream);

// ---- decode.cu: attention of query rows over paged bf16 or 8-bit KV (GQA), each
// (row, KV head) split into `splits` ranges of its positions (partials in part f32 [rows,
// n_heads, splits, head_dim + 2], merged by the last block of each (row, KV head), counted
// in done int32 [rows * n_kv_heads], zero before a launch and after it; both unused with
// 1 split). Rows as in ifd_attention; several rows may be one chunk's (a speculative check),
// chunks int32 [n_chunks, 4] = (first row, tokens, start position, state slot) saying where
// each chunk's positions written by this pass begin (null: each row is its chunk's one
// token).  q bf16 [rows, n_heads * head_dim] -> out bf16, same
int ifd_decode_supported(int head_dim, int group);
// mma != 0: the tensor-core build (bf16 KV, head_dim 64 or 128; ifd_decode_mma_supported);
// mma == 2 its grouped build: up to 16 / group consecutive rows of one chunk in one block,
// reading the chunk's K/V once for them (a speculative check's rows); mma == 3 / 4 its
// cluster form in blocks of 8 / 4 warps: the 2..16 splits of a (row, KV head) one
// thread-block cluster that merges them in distributed shared memory (part and done unused).
int ifd_decode_mma_supported(int kv_dtype, int head_dim, int group);
// Blocks of the tensor-core build one multiprocessor holds (0: the shape is not taken).
int ifd_decode_mma_blocks_per_sm(int head_dim, int group);
// Clusters of `splits` blocks of `warps` (4 or 8) warps of the cluster form the device
// holds at once (0: the shape or the cluster size is not taken; < 0: minus the CUDA error
// of a failed query).
int ifd_decode_cluster_capacity(int head_dim, int group, int splits, int warps);
// Profiling only: zeros into `n` bf16 values after a programmatic wait (what a kernel
// boundary costs where the attention runs).
int ifd_attention_stub(void* out, size_t n, void* stream);
// Profiling only: where the decode kernels stamp their stages' times (null: nowhere); see
// g_decode_probe in decode.cu. Not during a capture.
int ifd_decode_probe(void* buf);
// Profiling only: the region where each file's kernels append their blocks' stage stamps
// (null: nowhere); see ifd::kprobe in common.cuh. Not during a capture.
int ifd_kernel_probe_gemv(void* region);
int ifd_kernel_probe_norm(void* region);
int ifd_kernel_probe_fused(void* region);
int ifd_kernel_probe_decode(void* region);
int ifd_decode_attention(IfdPaged kv, const void* q, int rows, int n_heads, float scale,
                         const int32_t* seq, const int32_t* pos, const int32_t* chunks,
                         const int32_t* bt_off,
                         const int32_t* bt, int splits, float* part, int32_t* done, int mma,
                         void* out, void* stream);

// ---- state.cu: the recurrent-state slots of hybrid models (crate::kv::StateLayout): per
// linear layer a conv plane f32 [slots, conv_elems] and a delta plane f32 [slots,
// delta_elems]; planes: DEVICE array [n_layers * 2] (layer l's conv at 2l, delta at 2l + 1).
// A slot's image: per layer its conv then its delta state (n_layers * (conv + delta) f32).
// Copies slot pairs[2i] over pairs[2i + 1] for i < n (DEVICE int32 [n, 2]); the pairs of one
// call must be independent (no slot written by one is read or written by another).
int ifd_copy_state_slots(float* const* planes, int n_layers, size_t conv_elems,
                         size_t delta_elems, const int32_t* pairs, int n, void* stream);
// Slots ids[0..n] (DEVICE) into (from) image DEVICE f32 [n, slot image], one after the other.
int ifd_gather_state_slots(float* const* planes, int n_layers, size_t conv_elems,
                           size_t delta_elems, const int32_t* ids, int n, float* image,
                           void* stream);
int ifd_scatter_state_slots(float* const* planes, int n_layers, size_t conv_elems,
                            size_t delta_elems, const int32_t* ids, int n, const float* image,
                            void* stream);

// ---- delta_net.cu and delta_rule.cu: Gated DeltaNet layers. chunks: DEVICE int32
// [n_chunks, 4] = (first token row, tokens, start position, state slot) per chunk of the
// pass (slot < 0: a padding row: zero output, no state kept); seq: DEVICE int32 [n_tokens],
// each token's chunk.
// Causal depthwise conv + SiLU: out[t, c] = silu(Σ_i w[c, i] x[t - (taps - 1) + i, c]), the
// rows before a chunk from its slot's conv state (zeros at position 0), which keeps the
// chunk's last taps - 1 rows after.  x f32 [n_tokens, dim], w f32 [dim, taps], state: the
// layer's conv plane f32 [slots, taps - 1, dim] -> out f32 [n_tokens, dim]; taps <= 9
int ifd_causal_conv1d_silu(const float* x, const float* w, float* state, const int32_t* chunks,
                           int n_chunks, const int32_t* seq, int n_tokens, int dim, int taps,
                           float* out, void* stream);
// In place, every d-slice of x f32 [slices, d]: x * rsqrt(Σx² + eps) * scale.
int ifd_l2_norm_heads(float* x, int slices, int d, float eps, float scale, void* stream);
// g = -exp(a_log) * softplus(a + dt_bias), beta = sigmoid(b)
// a, b f32 [rows, heads]; a_log, dt_bias f32 [heads] -> g, beta f32 [rows, heads]
int ifd_delta_gates(const float* a, const float* b, const float* a_log, const float* dt_bias,
                    int rows, int heads, float* g, float* beta, void* stream);
// w * (x * rsqrt(mean(x²) + eps)) * silu(z) per d-slice.  x, z f32 [slices, d], w f32 [d]
// -> out bf16 [slices, d]
int ifd_gated_rms_norm(const float* x, const float* z, const float* w, int slices, int d,
                       float eps, void* out, void* stream);
// x f32 [rows, heads * 2d] -> a, b f32 [rows, heads * d]: each 2d-slice's halves.
int ifd_split_head_pairs(const float* x, int rows, int heads, int d, float* a, float* b,
                         void* stream);
// x *= sigmoid(gate), in place; x f32 or bf16 (x_bf16) [n], gate f32 [n].
int ifd_sigmoid_mul(void* x, int x_bf16, const float* gate, size_t n, void* stream);
// The gated delta rule of every chunk, from and into its slot in the layer's delta plane
// state f32 [slots, nv, dk, dv] (zero at position 0); value head h reads key head
// h / (nv / nk). recurrent: the one-token chunks (others are left alone); chunked: the
// longer ones, over 64-token pieces at absolute multiples of 64. The two together cover a
// pass.  q, k f32 [n, nk * dk], v f32 [n, nv * dv], g, beta f32 [n, nv] -> out f32 [n, nv * dv]
int ifd_delta_rule_recurrent(const float* q, const float* k, const float* v, const float* g,
                             const float* beta, float* state, const int32_t* chunks,
                             int n_chunks, int nk, int nv, int dk, int dv, float* out,
                             void* stream);
// Whether the chunked kernel's shared memory for key heads of dk fits this device.
int ifd_delta_rule_chunked_supported(int dk);
int ifd_delta_rule_chunked(const float* q, const float* k, const float* v, const float* g,
                           const float* beta, float* state, const int32_t* chunks, int n_chunks,
                           int nk, int nv, int dk, int dv, float* out, void* stream);
// The chunked form on tensor cores (delta_pieces.cu; key heads of up to 128, where
// supported says so): every piece's WY form at once into ws, then a scan per chunk.
// pieces: DEVICE int32 [n_pieces, 2] = (chunk, piece of the chunk) of the longer chunks'
// pieces; piece_base: DEVICE int32 [n_chunks], each chunk's first piece in that table;
// ws: DEVICE f32 [ws_floats(n_pieces, nv, dk, dv)].
int ifd_delta_pieces_supported(int dk, int dv);
size_t ifd_delta_pieces_ws_floats(int n_pieces, int nv, int dk, int dv);
int ifd_delta_rule_pieces(const float* q, const float* k, const float* v, const float* g,
                          const float* beta, float* state, const int32_t* chunks, int n_chunks,
                          const int32_t* pieces, const int32_t* piece_base, int n_pieces, int nk,
                          int nv, int dk, int dv, float* ws, float* out, void* stream);
}

extern "C" {
// ---- sample.cu: out[i] = argmax of logits row rows[i] (NaN as -inf, +inf as FLT_MAX,
// lowest id on ties, 0 for a row of -inf).  logits f32 [*, vocab], rows, out [n]
int ifd_argmax_rows(const float* logits, int vocab, const int32_t* rows, int n, int32_t* out,
                    void* stream);
}

extern "C" {
// ---- sample_plan.cu: planned draws (inferd-core `Sampler::plan_draw`), one block per plan.
// logits f32 [*, vocab]; plans SamplePlan [n]; words: the plans' masks; pens: their penalty
// entries (token, count | repeated << 31); scratch f32 [n, 2, vocab]; out SampleOut [n].
int ifd_sample_plans(const float* logits, int vocab, const void* plans, const uint32_t* words,
                     const uint32_t* pens, int n, float* scratch, void* out, void* stream);
}
