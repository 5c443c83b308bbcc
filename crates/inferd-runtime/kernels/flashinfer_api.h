// inferd <-> FlashInfer (0.7.2.post1) paged attention: a small C ABI over FlashInfer's
// scheduler ("plan", host) and its kernels ("run", device), for inferd's KV layout.
//
// Every function returns a cudaError_t as int (0 = success). On failure
// ifd_fi_last_error() gives a message (thread-local; FlashInfer's own checks, e.g.
// "workspace too small", end up there with cudaErrorInvalidValue = 1, unsupported
// shapes with cudaErrorNotSupported = 801).
//
// What this covers (everything else is refused with cudaErrorNotSupported):
//   * K/V: bf16, per layer two planes K and V, each [num_blocks, n_kv_heads, page_size,
//     head_dim] row-major (FlashInfer's HND layout), the same page ids for K and V.
//   * q: bf16 [n_tokens, n_heads, head_dim] (= [n_tokens, n_heads*head_dim] row-major).
//     Queries are NOT accepted as f32: FlashInfer's tensor-core prefill needs q in the
//     KV dtype. ifd_fi_f32_to_bf16 below converts (or have RoPE write bf16).
//   * out: bf16 [n_tokens, n_heads*head_dim]; optional lse f32 [n_tokens, n_heads]:
//     FlashInfer's convention, BASE-2 logsumexp of the scaled scores
//     (log2(sum_j 2^(s_j * log2(e)))), i.e. natural lse * log2(e).
//   * head_dim 64, 128 or 256; n_heads % n_kv_heads == 0; any page_size >= 1 (16 default).
//     Decode kernel: GQA group n_heads/n_kv_heads in {1,2,3,4,6,8,16}; other groups
//     are served by the prefill kernel (IFD_FI_AUTO does that by itself).
//   * causal, no sliding window, no soft cap, no RoPE inside attention (q/k are
//     already rotated). Tokens of one sequence are consecutive rows of q/out, sequences
//     in the order of the plan; sequence i has qo_len = qo_indptr[i+1]-qo_indptr[i]
//     new tokens at positions kv_len[i]-qo_len .. kv_len[i]-1, and their K/V are already
//     in the cache (so query j of the chunk sees KV positions 0 ..= kv_len-qo_len+j).
//   * GPU: sm_90 (H100/H200), the library is built for sm_90a only.
//
// Per forward pass (see NOTES.md):  ifd_fi_plan once (host work + small H2D copies on
// `stream`), then ifd_fi_run once per layer on the same stream (only kernel launches;
// decode with cuda_graph = 1 can be captured in a CUDA graph and replayed after each
// new plan of the same batch size).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Caller-owned buffers, allocated once and reused by every plan. One workspace serves
// one live plan: the plan writes its schedule (and the page tables) into int_ws and the
// run's split-KV partial results go to float_ws, so two plans that must be alive at the
// same time (e.g. a decode plan and a prefill plan used in one pass) need two
// workspaces. Sizes: ifd_fi_workspace_bytes.
typedef struct IfdFiWorkspace {
  void* float_ws;         // DEVICE, float_ws_bytes, 256-byte aligned (cudaMalloc is)
  size_t float_ws_bytes;
  void* int_ws;           // DEVICE, int_ws_bytes, 256-byte aligned
  size_t int_ws_bytes;
  void* pinned_ws;        // HOST page-locked (cudaHostAlloc / ifd_host_alloc), int_ws_bytes
  // Capacity of the page-table region at the start of int_ws/pinned_ws: the most
  // sequences and the most pages (sum over sequences of ceil(kv_len/page_size)) one plan
  // may hold. Fixed for the life of the workspace (it fixes device addresses, which is
  // what makes CUDA-graph replay possible).
  int32_t max_seqs;
  int32_t max_pages;
  // Optional cudaEvent_t (created with cudaEventDisableTiming), or NULL. The plan fills
  // pinned_ws on the host and copies it with cudaMemcpyAsync; the next plan must not
  // overwrite pinned_ws before that copy ran. With an event, plan records it after its
  // copies and waits on it (cudaEventSynchronize) before touching pinned_ws next time.
  // With NULL the caller guarantees it (e.g. it synchronizes the stream every step,
  // which a sampler that reads tokens back does anyway).
  void* event;
} IfdFiWorkspace;

// The model's attention shape.
typedef struct IfdFiShape {
  int32_t n_heads;     // query heads
  int32_t n_kv_heads;  // KV heads (n_heads % n_kv_heads == 0)
  int32_t head_dim;    // 64, 128 or 256
  int32_t page_size;   // = inferd block_size
} IfdFiShape;

// One pass's batch, ALL ON THE HOST (the scheduler runs on the CPU).
typedef struct IfdFiBatch {
  int32_t n_seqs;
  // [n_seqs + 1] row offsets of each sequence's queries in q/out: qo_indptr[0] = 0,
  // qo_indptr[n_seqs] = n_tokens. Every qo_len >= 1.
  const int32_t* qo_indptr;
  // [n_seqs] KV length of each sequence after this pass's append (start_pos + qo_len),
  // >= qo_len.
  const int32_t* kv_len;
  // [n_seqs + 1] CSR offsets into the block tables (inferd's bt_off, host copy).
  const int32_t* bt_off;
  // [bt_off[n_seqs]] physical block ids, host copy (inferd's bt). A sequence's row may
  // hold more blocks than it uses; only the first ceil(kv_len/page_size) are read. The
  // plan builds FlashInfer's exact page tables from it into int_ws. May be NULL when
  // bt_dev is given.
  const int32_t* bt;
  // Optional DEVICE copy of bt, used directly as FlashInfer's page index array (nothing
  // of it is copied). Only allowed when every row is exact, i.e.
  // bt_off[i+1]-bt_off[i] == ceil(kv_len[i]/page_size) (checked, else
  // cudaErrorInvalidValue). For CUDA-graph replay its address must stay the same.
  const int32_t* bt_dev;
  // IFD_FI_SPLIT: the keys of one piece, in pages (> 0), the same for every sequence (so a
  // sequence's pieces follow from its own length, whatever else the plan holds); the
  // caller sizes float_ws for the plan's partials. Other kinds: 0.
  int32_t split_pages;
} IfdFiBatch;
#ifdef __cplusplus
// The Rust mirror (src/backend/cuda/flashinfer.rs `Batch`) asserts the same size.
static_assert(sizeof(IfdFiBatch) == 56, "IfdFiBatch's layout is shared with Rust");
#endif

// Rows of a ragged plan's contiguous K/V: sequence i's keys start at kv_tok_indptr[i], a
// multiple of this; the rows from its kv_len to the next start are zero.
#define IFD_FI_RAGGED_ROW_ALIGN 128

enum {
  IFD_FI_AUTO = 0,     // decode kernel if every qo_len == 1 (and the GQA group is one it
                       // has), else the SM90 prefill kernel
  IFD_FI_DECODE = 1,   // FlashInfer BatchDecode (CUDA cores, split-KV + merge), qo_len == 1
  IFD_FI_PREFILL = 2,  // FlashInfer SM90 (FA3, wgmma) paged prefill, any qo_len, causal
  IFD_FI_RAGGED = 3,   // the same over contiguous K/V (TMA-loaded), which the caller fills
                       // per layer with ifd_kv_gather from the plan's page tables
  IFD_FI_SPLIT = 4,    // FlashInfer FA2 paged prefill (mma.sync), any qo_len, causal: packs a
                       // KV head's query group into its query tiles and splits the keys to
                       // fill the SMs (partials in float_ws), for chunks of few query tiles
                       // over long contexts
};

// Filled by ifd_fi_plan, read by ifd_fi_run; plain data, the caller just keeps it
// (by value) from the plan until the last run of the pass. Fields are informative.
typedef struct IfdFiPlan {
  int32_t kind;        // IFD_FI_DECODE, IFD_FI_PREFILL, IFD_FI_RAGGED or IFD_FI_SPLIT (0: not
                       // planned)
  int32_t n_seqs;
  int32_t n_tokens;
  int32_t cuda_graph;  // decode planned in CUDA-graph mode
  IfdFiShape shape;
  int32_t split_kv;    // decode, split: split-KV (partials in float_ws, merged by a 2nd
                       // kernel)
  int32_t kv_tokens;   // rows of a ragged plan's contiguous K/V: the sum of kv_len, each
                       // rounded up to IFD_FI_RAGGED_ROW_ALIGN
  int64_t fi_info[16];  // FlashInfer's DecodePlanInfo (10) / PrefillPlanSM90Info (9) /
                        // PrefillPlanInfo (15)
  // Device page tables the run reads (inside int_ws, or bt_dev):
  int32_t* kv_indptr;       // [n_seqs + 1] page offsets
  int32_t* kv_indices;      // [kv_indptr[n_seqs]] page ids
  int32_t* kv_last_page_len;  // [n_seqs], 1..page_size
  int32_t* kv_tok_indptr;   // [n_seqs + 1] each sequence's first row in contiguous K/V
                            // (prefix sums of kv_len rounded up to
                            // IFD_FI_RAGGED_ROW_ALIGN; ifd_kv_gather's tok_indptr)
  void* int_ws;             // the workspace this plan lives in (checked by run)
} IfdFiPlan;
#ifdef __cplusplus
// The Rust mirror (src/backend/cuda/flashinfer.rs `Plan`) asserts the same size.
static_assert(sizeof(IfdFiPlan) == 208, "IfdFiPlan's layout is shared with Rust");
#endif

// Conservative workspace sizes for a shape and the largest batch a workspace will see:
// max_seqs sequences, max_tokens query rows, max_pages pages (these two also go into
// IfdFiWorkspace). Host only; queries the current device's SM count if it can (else
// assumes 256 SMs). float: split-KV decode partials (an FA2 prefill plan's are the caller's
// to add: IfdFiBatch.split_pages); int: page tables +
// schedule.
int ifd_fi_workspace_bytes(const IfdFiShape* shape, int32_t max_seqs, int32_t max_tokens,
                           int32_t max_pages, size_t* float_ws_bytes, size_t* int_ws_bytes);

// Plans one pass. mode: IFD_FI_AUTO / IFD_FI_DECODE / IFD_FI_PREFILL / IFD_FI_RAGGED /
// IFD_FI_SPLIT. cuda_graph = 1
// (decode only; ignored for prefill): plan so that the run's kernel arguments depend
// only on (workspace, n_seqs, shape, q/k/v/out pointers): always split-KV, fixed padded
// grid. Host work, then H2D copies (page tables + schedule) queued on `stream`; returns
// without waiting for them. Must be on the device that runs.
int ifd_fi_plan(const IfdFiWorkspace* ws, const IfdFiShape* shape, const IfdFiBatch* batch,
                int mode, int cuda_graph, IfdFiPlan* plan, void* stream);

// Attention of one layer for a planned pass. All DEVICE pointers:
typedef struct IfdFiRunArgs {
  const void* q;    // bf16 [n_tokens, n_heads * head_dim]
  const void* k;    // bf16 this layer's K plane [num_blocks, n_kv_heads, page_size, head_dim];
                    // a ragged plan's: contiguous [kv_tokens, n_kv_heads, head_dim]
  const void* v;    // bf16 this layer's V plane, the shape of k
  void* out;        // bf16 [n_tokens, n_heads * head_dim] (must not alias q)
  float* lse;       // optional f32 [n_tokens, n_heads], or NULL
  float sm_scale;   // softmax scale, usually 1/sqrt(head_dim)
} IfdFiRunArgs;

// Queues the layer's attention on `stream` (kernel launches only; no host sync, no
// allocation, no copies): graph-capturable. The workspace must be the plan's.
int ifd_fi_run(const IfdFiWorkspace* ws, const IfdFiPlan* plan, const IfdFiRunArgs* args,
               void* stream);

// out[i] = bf16(x[i]), i < n: f32 queries -> the bf16 q that ifd_fi_run needs.
int ifd_fi_f32_to_bf16(const float* x, void* out, size_t n, void* stream);

// A cudaEvent_t for IfdFiWorkspace.event (cudaEventDisableTiming), and its destruction.
int ifd_fi_event_create(void** event);
int ifd_fi_event_destroy(void* event);

// Measurement only (fi_prefill_bench.cu): one sequence's causal prefill at head_dim 128,
// n_q queries at the end of kv_len keys, by the paged SM90 kernel over 16-token pages and
// by the ragged one over contiguous K/V (TMA), on the same values: mean ms a launch of
// each over `iters`, and the largest |difference| between their outputs.
int ifd_fi_prefill_bench(int n_q, int kv_len, int n_heads, int n_kv, int iters, float* paged_ms,
                         float* ragged_ms, float* max_diff);

// Message of this thread's last failed ifd_fi_* call ("" if none).
const char* ifd_fi_last_error(void);

#ifdef __cplusplus
}  // extern "C"
#endif
