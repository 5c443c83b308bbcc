// The C API of flashinfer_api.h: validation, the page-table region of the workspace,
// plan/run dispatch to the FlashInfer instantiations (src/fi_*.cu), error messages.
// Includes no FlashInfer header (it compiles in seconds).
#include "fi_sms.h"  // workspace sizes for a share's SM count, as the planners see it
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "fi_internal.h"
#include "flashinfer_api.h"

namespace ifd_fi {
namespace {
thread_local std::string g_err;

constexpr size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// A ragged plan's sequences start at multiples of the kernel's largest key tile in the
// contiguous K/V, the rows between a sequence's end and the next start zero (ifd_kv_gather
// writes them): a tile that runs past a sequence's keys reads zeros, as the paged kernel's
// zero-filled loads do, never the next sequence's values (a masked score times a
// non-finite value would still be NaN).
constexpr int kRaggedRowAlign = IFD_FI_RAGGED_ROW_ALIGN;

// The page-table region at the start of int_ws / pinned_ws (fixed by the capacities).
// indptr [max_seqs + 1] (pages), last [max_seqs], tok [max_seqs + 1] (contiguous K/V rows of
// a ragged plan), qo [max_seqs + 1] (query row offsets, which the FA2 kernel reads on the
// device), indices [max_pages].
struct PtLayout {
  size_t indptr, last, tok, qo, indices, bytes;
};
PtLayout pt_layout(int32_t max_seqs, int32_t max_pages) {
  PtLayout l;
  l.indptr = 0;
  l.last = align_up((static_cast<size_t>(max_seqs) + 1) * 4, 256);
  l.tok = l.last + align_up(static_cast<size_t>(max_seqs) * 4, 256);
  l.qo = l.tok + align_up((static_cast<size_t>(max_seqs) + 1) * 4, 256);
  l.indices = l.qo + align_up((static_cast<size_t>(max_seqs) + 1) * 4, 256);
  l.bytes = l.indices + align_up(static_cast<size_t>(max_pages) * 4, 256);
  return l;
}

int fail(cudaError_t e, const std::string& msg) {
  g_err = msg;
  return static_cast<int>(e);
}

bool shape_ok(const IfdFiShape* s, std::string* why) {
  if (!s) return *why = "shape is NULL", false;
  if (s->head_dim != 64 && s->head_dim != 128 && s->head_dim != 256)
    return *why = "head_dim " + std::to_string(s->head_dim) + " not built (64, 128, 256)", false;
  if (s->n_heads <= 0 || s->n_kv_heads <= 0 || s->n_heads % s->n_kv_heads != 0)
    return *why = "n_heads must be a positive multiple of n_kv_heads", false;
  if (s->page_size <= 0) return *why = "page_size must be positive", false;
  return true;
}
}  // namespace

void set_error(const char* msg) { g_err = msg; }

bool decode_group_supported(int g) {
  // FlashInfer's DISPATCH_GQA_GROUP_SIZE (utils.cuh).
  return g == 1 || g == 2 || g == 3 || g == 4 || g == 6 || g == 8 || g == 16;
}
}  // namespace ifd_fi

using namespace ifd_fi;

extern "C" {

const char* ifd_fi_last_error(void) { return g_err.c_str(); }

int ifd_fi_workspace_bytes(const IfdFiShape* shape, int32_t max_seqs, int32_t max_tokens,
                           int32_t max_pages, size_t* float_ws_bytes, size_t* int_ws_bytes) {
  std::string why;
  if (!shape_ok(shape, &why)) return fail(cudaErrorInvalidValue, why);
  if (max_seqs <= 0 || max_tokens < max_seqs || max_pages <= 0 || !float_ws_bytes ||
      !int_ws_bytes)
    return fail(cudaErrorInvalidValue, "workspace_bytes: bad capacities");
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      sms <= 0) {
    cudaGetLastError();
    sms = 256;
  }
  const size_t group = shape->n_heads / shape->n_kv_heads;
  const size_t hd = shape->head_dim;
  // Decode: FlashInfer's grid is at most (resident CTAs per SM <= 32) * SMs CTAs; split-KV
  // keeps padded_batch * n_kv_heads within it, so partials need <= group * grid rows of
  // (head_dim + 1) floats. Without split no float workspace is used.
  const size_t grid = 32 * static_cast<size_t>(sms);
  const size_t dec_float = group * grid * (hd + 1) * 4 + 4096;
  const size_t padded = std::max<size_t>(max_seqs, grid);
  const size_t dec_int = 4 * (padded * 4 + 16) + padded + 4096;
  // SM90 prefill: no float workspace; 7 int arrays of (work tiles) + work_indptr. Work
  // tiles <= n_heads * (ceil(tokens / 128) + seqs) (CTA tile is 128 or 192 rows).
  const size_t works = static_cast<size_t>(shape->n_heads) *
                       ((static_cast<size_t>(max_tokens) + 127) / 128 + max_seqs);
  const size_t pre_int = 7 * (works * 4 + 16) + (sms + 1) * 4 + 16 + 4096;
  // FA2 prefill: its partials are the caller's to size (split_pages); its schedule: 3
  // arrays of tiles (at most tokens * group / 16 + seqs unsplit, and with pieces sized to
  // fill the SMs from each sequence's own tiles, at most 2 * SMs / n_kv_heads more a
  // sequence), o_indptr, the chunk size and merge_indptr (a query row each).
  const size_t tiles = static_cast<size_t>(max_tokens) * group / 16 +
                       static_cast<size_t>(max_seqs) * (1 + 2 * sms / shape->n_kv_heads) + 1;
  const size_t fa2_int = 3 * (tiles * 4 + 16) + (static_cast<size_t>(max_seqs) + 1) * 4 +
                         (static_cast<size_t>(max_tokens) + 1) * 4 + 4096;
  *float_ws_bytes = align_up(dec_float, 1 << 20);
  *int_ws_bytes = align_up(
      pt_layout(max_seqs, max_pages).bytes + std::max({dec_int, pre_int, fa2_int}), 1 << 16);
  return 0;
}

int ifd_fi_plan(const IfdFiWorkspace* ws, const IfdFiShape* shape, const IfdFiBatch* batch,
                int mode, int cuda_graph, IfdFiPlan* plan, void* stream) {
  try {
    std::string why;
    g_err.clear();
    if (!plan) return fail(cudaErrorInvalidValue, "plan is NULL");
    std::memset(plan, 0, sizeof(*plan));
    if (!shape_ok(shape, &why)) return fail(cudaErrorInvalidValue, why);
    if (!ws || !ws->int_ws || !ws->pinned_ws || !ws->float_ws || ws->max_seqs <= 0 ||
        ws->max_pages <= 0)
      return fail(cudaErrorInvalidValue, "workspace incomplete");
    if (!batch || !batch->qo_indptr || !batch->kv_len || !batch->bt_off ||
        (!batch->bt && !batch->bt_dev))
      return fail(cudaErrorInvalidValue, "batch incomplete");
    const int n = batch->n_seqs;
    if (n <= 0 || n > ws->max_seqs)
      return fail(cudaErrorInvalidValue, "n_seqs " + std::to_string(n) + " not in 1..max_seqs");
    const PtLayout L = pt_layout(ws->max_seqs, ws->max_pages);
    if (ws->int_ws_bytes <= L.bytes + 4096)
      return fail(cudaErrorInvalidValue, "int_ws smaller than its page-table region");
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int ps = shape->page_size, hd = shape->head_dim;
    const int group = shape->n_heads / shape->n_kv_heads;

    // Validate the batch; choose the kernel.
    const int32_t* qo = batch->qo_indptr;
    if (qo[0] != 0) return fail(cudaErrorInvalidValue, "qo_indptr[0] must be 0");
    bool all_one = true;
    int64_t n_pages = 0;
    for (int i = 0; i < n; ++i) {
      const int ql = qo[i + 1] - qo[i], kl = batch->kv_len[i];
      if (ql < 1 || kl < ql)
        return fail(cudaErrorInvalidValue, "sequence " + std::to_string(i) +
                                               ": need 1 <= qo_len <= kv_len");
      all_one = all_one && ql == 1;
      const int np = (kl + ps - 1) / ps;
      const int row = batch->bt_off[i + 1] - batch->bt_off[i];
      if (row < np || (batch->bt_dev && row != np))
        return fail(cudaErrorInvalidValue,
                    "sequence " + std::to_string(i) + ": block table has " +
                        std::to_string(row) + " blocks, kv_len needs " + std::to_string(np) +
                        (batch->bt_dev ? " (bt_dev needs exact rows)" : ""));
      n_pages += np;
    }
    const int n_tokens = qo[n];
    int kind = mode;
    if (kind == IFD_FI_AUTO)
      kind = all_one && decode_group_supported(group) ? IFD_FI_DECODE : IFD_FI_PREFILL;
    if (kind == IFD_FI_DECODE && !all_one)
      return fail(cudaErrorInvalidValue, "decode needs qo_len == 1 for every sequence");
    if (kind == IFD_FI_DECODE && !decode_group_supported(group))
      return fail(cudaErrorNotSupported, "decode kernel has no GQA group " +
                                             std::to_string(group) + " (use prefill)");
    if (kind != IFD_FI_DECODE && kind != IFD_FI_PREFILL && kind != IFD_FI_RAGGED &&
        kind != IFD_FI_SPLIT)
      return fail(cudaErrorInvalidValue, "bad mode");
    if ((kind == IFD_FI_SPLIT) != (batch->split_pages > 0) || batch->split_pages < 0)
      return fail(cudaErrorInvalidValue,
                  "split_pages: > 0 for IFD_FI_SPLIT plans (their pieces), else 0");
    if (kind == IFD_FI_RAGGED && batch->bt_dev)
      return fail(cudaErrorInvalidValue, "ragged plans take host block tables (bt), not bt_dev");
    if (!batch->bt_dev && n_pages > ws->max_pages)
      return fail(cudaErrorInvalidValue, "batch needs " + std::to_string(n_pages) +
                                             " pages, workspace max_pages is " +
                                             std::to_string(ws->max_pages));

    int dev = 0, major = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e != cudaSuccess) return fail(e, std::string("no device: ") + cudaGetErrorString(e));
    if (major != 9) return fail(cudaErrorNotSupported, "built for sm_90a (H100/H200) only");

    // The previous plan's H2D copies must have read pinned_ws before we overwrite it.
    cudaEvent_t ev = static_cast<cudaEvent_t>(ws->event);
    if (ev && (e = cudaEventSynchronize(ev)) != cudaSuccess)
      return fail(e, std::string("event: ") + cudaGetErrorString(e));

    // Exact FlashInfer page tables, on the host in pinned_ws, then one copy to int_ws.
    char* ph = static_cast<char*>(ws->pinned_ws);
    char* pd = static_cast<char*>(ws->int_ws);
    int32_t* indptr_h = reinterpret_cast<int32_t*>(ph + L.indptr);
    int32_t* last_h = reinterpret_cast<int32_t*>(ph + L.last);
    int32_t* tok_h = reinterpret_cast<int32_t*>(ph + L.tok);
    int32_t* qo_dev_h = reinterpret_cast<int32_t*>(ph + L.qo);
    int32_t* indices_h = reinterpret_cast<int32_t*>(ph + L.indices);
    std::vector<int32_t> kv_len_h(batch->kv_len, batch->kv_len + n);
    if (batch->bt_dev) {
      for (int i = 0; i <= n; ++i) indptr_h[i] = batch->bt_off[i];
    } else {
      indptr_h[0] = 0;
      for (int i = 0; i < n; ++i) {
        const int np = (kv_len_h[i] + ps - 1) / ps;
        std::memcpy(indices_h + indptr_h[i], batch->bt + batch->bt_off[i], np * 4);
        indptr_h[i + 1] = indptr_h[i] + np;
      }
    }
    for (int i = 0; i < n; ++i) last_h[i] = kv_len_h[i] - ((kv_len_h[i] + ps - 1) / ps - 1) * ps;
    tok_h[0] = 0;
    for (int i = 0; i < n; ++i)
      tok_h[i + 1] = tok_h[i] + static_cast<int32_t>(align_up(kv_len_h[i], kRaggedRowAlign));
    std::memcpy(qo_dev_h, qo, static_cast<size_t>(n + 1) * 4);
    const size_t pt_copy = batch->bt_dev ? L.indices : L.indices + static_cast<size_t>(n_pages) * 4;
    if ((e = cudaMemcpyAsync(pd, ph, pt_copy, cudaMemcpyHostToDevice, s)) != cudaSuccess)
      return fail(e, std::string("page-table copy: ") + cudaGetErrorString(e));

    FiBufs b{ws->float_ws, ws->float_ws_bytes, pd + L.bytes, ph + L.bytes,
             ws->int_ws_bytes - L.bytes};
    // FlashInfer takes non-const host arrays (it only reads them).
    std::vector<int32_t> qo_h(qo, qo + n + 1);
    std::vector<int32_t> kv_indptr_h(indptr_h, indptr_h + n + 1);
    int split = 0;
    if (kind == IFD_FI_DECODE) {
      auto dec = hd == 64 ? decode_plan<64> : hd == 128 ? decode_plan<128> : decode_plan<256>;
      e = dec(b, kv_indptr_h.data(), n, shape->n_heads, shape->n_kv_heads, ps, cuda_graph != 0,
              plan->fi_info, &split, s);
    } else if (kind == IFD_FI_SPLIT) {
      auto fa2 = hd == 64 ? fa2_plan<64> : hd == 128 ? fa2_plan<128> : fa2_plan<256>;
      e = fa2(b, qo_h.data(), kv_indptr_h.data(), n, n_tokens, shape->n_heads, shape->n_kv_heads,
              ps, batch->split_pages, plan->fi_info, &split, s);
    } else if (kind == IFD_FI_RAGGED) {
      std::vector<int32_t> tok(tok_h, tok_h + n + 1);
      auto rag = hd == 64 ? ragged_plan<64> : hd == 128 ? ragged_plan<128> : ragged_plan<256>;
      e = rag(b, qo_h.data(), tok.data(), kv_len_h.data(), n, n_tokens, shape->n_heads,
              shape->n_kv_heads, plan->fi_info, s);
    } else {
      auto pre = hd == 64 ? prefill_plan<64> : hd == 128 ? prefill_plan<128> : prefill_plan<256>;
      e = pre(b, qo_h.data(), kv_indptr_h.data(), kv_len_h.data(), n, n_tokens, shape->n_heads,
              shape->n_kv_heads, ps, plan->fi_info, s);
    }
    if (e != cudaSuccess) {
      if (g_err.empty())
        g_err = std::string("FlashInfer plan: ") + cudaGetErrorString(e);
      return static_cast<int>(e);
    }
    if (ev && (e = cudaEventRecord(ev, s)) != cudaSuccess)
      return fail(e, std::string("event record: ") + cudaGetErrorString(e));

    plan->kind = kind;
    plan->n_seqs = n;
    plan->n_tokens = n_tokens;
    plan->cuda_graph = kind == IFD_FI_DECODE && cuda_graph ? 1 : 0;
    plan->shape = *shape;
    plan->split_kv = split;
    plan->kv_tokens = tok_h[n];
    plan->kv_tok_indptr = reinterpret_cast<int32_t*>(pd + L.tok);
    plan->kv_indptr = reinterpret_cast<int32_t*>(pd + L.indptr);
    plan->kv_last_page_len = reinterpret_cast<int32_t*>(pd + L.last);
    plan->kv_indices = batch->bt_dev ? const_cast<int32_t*>(batch->bt_dev)
                                     : reinterpret_cast<int32_t*>(pd + L.indices);
    plan->int_ws = ws->int_ws;
    g_err.clear();
    return 0;
  } catch (const std::exception& ex) {
    std::memset(plan, 0, sizeof(*plan));
    return fail(cudaErrorInvalidValue, std::string("FlashInfer plan: ") + ex.what());
  } catch (...) {
    std::memset(plan, 0, sizeof(*plan));
    return fail(cudaErrorUnknown, "FlashInfer plan: unknown exception");
  }
}

int ifd_fi_run(const IfdFiWorkspace* ws, const IfdFiPlan* plan, const IfdFiRunArgs* args,
               void* stream) {
  try {
    if (!ws || !plan || !args) return fail(cudaErrorInvalidValue, "run: NULL argument");
    if (plan->kind != IFD_FI_DECODE && plan->kind != IFD_FI_PREFILL &&
        plan->kind != IFD_FI_RAGGED && plan->kind != IFD_FI_SPLIT)
      return fail(cudaErrorInvalidValue, "run: plan not planned");
    if (plan->int_ws != ws->int_ws)
      return fail(cudaErrorInvalidValue, "run: plan belongs to another workspace");
    if (!args->q || !args->k || !args->v || !args->out)
      return fail(cudaErrorInvalidValue, "run: q/k/v/out must be set");
    const PtLayout L = pt_layout(ws->max_seqs, ws->max_pages);
    FiRun r;
    r.q = args->q;
    r.k = args->k;
    r.v = args->v;
    r.o = args->out;
    r.lse = args->lse;
    r.sm_scale = args->sm_scale;
    r.n_seqs = plan->n_seqs;
    r.n_tokens = plan->n_tokens;
    r.n_heads = plan->shape.n_heads;
    r.n_kv_heads = plan->shape.n_kv_heads;
    r.page_size = plan->shape.page_size;
    r.kv_tokens = plan->kv_tokens;
    r.kv_indptr = plan->kv_indptr;
    r.kv_indices = plan->kv_indices;
    r.kv_last_page_len = plan->kv_last_page_len;
    r.qo_indptr = reinterpret_cast<int32_t*>(static_cast<char*>(ws->int_ws) + L.qo);
    r.float_ws = ws->float_ws;
    r.int_ws = static_cast<char*>(ws->int_ws) + L.bytes;
    r.info = plan->fi_info;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int hd = plan->shape.head_dim;
    auto run = plan->kind == IFD_FI_DECODE
                   ? (hd == 64 ? decode_run<64> : hd == 128 ? decode_run<128> : decode_run<256>)
               : plan->kind == IFD_FI_SPLIT
                   ? (hd == 64 ? fa2_run<64> : hd == 128 ? fa2_run<128> : fa2_run<256>)
               : plan->kind == IFD_FI_RAGGED
                   ? (hd == 64 ? ragged_run<64> : hd == 128 ? ragged_run<128> : ragged_run<256>)
                   : (hd == 64 ? prefill_run<64> : hd == 128 ? prefill_run<128> : prefill_run<256>);
    cudaError_t e = run(r, s);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess)
      return fail(e, std::string("FlashInfer run: ") + cudaGetErrorString(e));
    return 0;
  } catch (const std::exception& ex) {
    return fail(cudaErrorInvalidValue, std::string("FlashInfer run: ") + ex.what());
  } catch (...) {
    return fail(cudaErrorUnknown, "FlashInfer run: unknown exception");
  }
}

}  // extern "C"

namespace ifd_fi {
namespace {
__global__ void f32_to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ o,
                                   size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    o[i] = __float2bfloat16(x[i]);
}
}  // namespace
}  // namespace ifd_fi

extern "C" int ifd_fi_event_create(void** event) {
  if (!event) return fail(cudaErrorInvalidValue, "event_create: NULL");
  cudaEvent_t ev = nullptr;
  const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  *event = ev;
  return e == cudaSuccess ? 0 : fail(e, std::string("event_create: ") + cudaGetErrorString(e));
}

extern "C" int ifd_fi_event_destroy(void* event) {
  if (!event) return 0;
  const cudaError_t e = cudaEventDestroy(static_cast<cudaEvent_t>(event));
  return e == cudaSuccess ? 0 : fail(e, std::string("event_destroy: ") + cudaGetErrorString(e));
}

extern "C" int ifd_fi_f32_to_bf16(const float* x, void* out, size_t n, void* stream) {
  if (n == 0) return 0;
  const size_t b = (n + 255) / 256;
  const unsigned grid = static_cast<unsigned>(b < (1u << 16) ? b : (1u << 16));
  ifd_fi::f32_to_bf16_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      x, static_cast<__nv_bfloat16*>(out), n);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : fail(e, std::string("f32_to_bf16: ") + cudaGetErrorString(e));
}
