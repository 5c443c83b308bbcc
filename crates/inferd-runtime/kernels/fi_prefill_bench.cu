// Measurement only (`cuda_check fibench`): FlashInfer's SM90 causal prefill at head_dim 128
// over one sequence's K/V two ways, on the same values: paged as inferd's pool holds it
// (HND pages of 16 tokens, loaded by cp.async gathers, 128 x 96 tiles) and contiguous
// (the ragged kernel, K/V [tokens, heads, 128] loaded by TMA, 128 x 128 tiles). How far
// apart they are bounds what a KV layout that TMA can load would bring to prompt passes.
#include <cuda_bf16.h>

#include <vector>

#include "fi_internal.h"
#include "flashinfer_api.h"

namespace ifd_fi_bench {
constexpr int kHd = 128, kPage = 16;

// x[i] = a small value from i (any bf16 pattern times the same way; this one stays finite).
__global__ void fill_kernel(__nv_bfloat16* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    x[i] = __float2bfloat16((static_cast<int>(h & 1023) - 512) / 1024.f);
  }
}

// Paged K/V [pages, n_kv, 16, 128] from contiguous [tokens, n_kv, 128] (page p holds
// tokens 16p .. 16p + 15).
__global__ void to_pages_kernel(const __nv_bfloat16* src, __nv_bfloat16* dst, int tokens,
                                int n_kv) {
  const size_t n = size_t(tokens) * n_kv * kHd;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t d = i % kHd, h = (i / kHd) % n_kv, t = i / (kHd * size_t(n_kv));
    dst[((t / kPage * n_kv + h) * kPage + t % kPage) * kHd + d] = src[i];
  }
}

}  // namespace ifd_fi_bench

extern "C" int ifd_fi_prefill_bench(int n_q, int kv_len, int n_heads, int n_kv, int iters,
                                    float* paged_ms, float* ragged_ms, float* max_diff) {
  using namespace ifd_fi_bench;
  if (n_q <= 0 || kv_len < n_q || kv_len % kPage != 0 || n_kv <= 0 || n_heads % n_kv != 0 ||
      iters <= 0)
    return static_cast<int>(cudaErrorInvalidValue);
  cudaStream_t s = nullptr;
  const size_t nq = size_t(n_q) * n_heads * kHd, nkv = size_t(kv_len) * n_kv * kHd;
  const int pages = kv_len / kPage;
  __nv_bfloat16 *q, *k, *v, *kp, *vp, *o_paged, *o_ragged;
  float* lse;
  int32_t* indices;
  void *float_ws, *int_ws, *pinned;
  const size_t float_bytes = 512u << 20, int_bytes = 64u << 20;
  cudaError_t e = cudaSuccess;
  const auto ok = [&](cudaError_t x) { return (e = x) == cudaSuccess; };
  if (!ok(cudaMalloc(&q, nq * 2)) || !ok(cudaMalloc(&k, nkv * 2)) || !ok(cudaMalloc(&v, nkv * 2)) ||
      !ok(cudaMalloc(&kp, nkv * 2)) || !ok(cudaMalloc(&vp, nkv * 2)) ||
      !ok(cudaMalloc(&o_paged, nq * 2)) || !ok(cudaMalloc(&o_ragged, nq * 2)) ||
      !ok(cudaMalloc(&lse, size_t(n_q) * n_heads * 4)) ||
      !ok(cudaMalloc(&indices, size_t(pages) * 4)) || !ok(cudaMalloc(&float_ws, float_bytes)) ||
      !ok(cudaMalloc(&int_ws, int_bytes)) || !ok(cudaMallocHost(&pinned, int_bytes)))
    return static_cast<int>(e);
  fill_kernel<<<1024, 256, 0, s>>>(q, nq, 1);
  fill_kernel<<<1024, 256, 0, s>>>(k, nkv, 2);
  fill_kernel<<<1024, 256, 0, s>>>(v, nkv, 3);
  to_pages_kernel<<<1024, 256, 0, s>>>(k, kp, kv_len, n_kv);
  to_pages_kernel<<<1024, 256, 0, s>>>(v, vp, kv_len, n_kv);
  std::vector<int32_t> ids(pages);
  for (int i = 0; i < pages; ++i) ids[i] = i;
  cudaMemcpy(indices, ids.data(), size_t(pages) * 4, cudaMemcpyHostToDevice);

  // The paged run, through inferd's own plan and run (what a prompt pass launches).
  int32_t qo_indptr[2] = {0, n_q}, kv_indptr_pages[2] = {0, pages}, kv_lens[1] = {kv_len};
  int64_t info[9];
  ifd_fi::FiBufs b{float_ws, float_bytes, int_ws, pinned, int_bytes};
  if (!ok(ifd_fi::prefill_plan<kHd>(b, qo_indptr, kv_indptr_pages, kv_lens, 1, n_q, n_heads, n_kv,
                                     kPage, info, s)))
    return static_cast<int>(e);
  ifd_fi::FiRun r{};
  r.q = q, r.k = kp, r.v = vp, r.o = o_paged, r.lse = lse;
  r.sm_scale = 1.f / sqrtf(float(kHd));
  r.n_seqs = 1, r.n_tokens = n_q, r.n_heads = n_heads, r.n_kv_heads = n_kv, r.page_size = kPage;
  r.kv_indices = indices;
  r.float_ws = float_ws, r.int_ws = int_ws, r.info = info;
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  for (int i = 0; i < 2; ++i)
    if (!ok(ifd_fi::prefill_run<kHd>(r, s))) return static_cast<int>(e);
  cudaEventRecord(t0, s);
  for (int i = 0; i < iters; ++i) ifd_fi::prefill_run<kHd>(r, s);
  cudaEventRecord(t1, s);
  if (!ok(cudaEventSynchronize(t1))) return static_cast<int>(e);
  cudaEventElapsedTime(paged_ms, t0, t1);
  *paged_ms /= iters;

  // The ragged run, through inferd's own plan and run too (what a prompt run over a
  // contiguous copy launches): K/V contiguous, keys in rows.
  int32_t kv_indptr_tokens[2] = {0, kv_len};
  int64_t rinfo[9];
  if (!ok(ifd_fi::ragged_plan<kHd>(b, qo_indptr, kv_indptr_tokens, kv_lens, 1, n_q, n_heads, n_kv,
                                    rinfo, s)))
    return static_cast<int>(e);
  ifd_fi::FiRun rr = r;
  rr.k = k, rr.v = v, rr.o = o_ragged, rr.kv_tokens = kv_len, rr.info = rinfo;
  const auto ragged = [&] { return ifd_fi::ragged_run<kHd>(rr, s); };
  for (int i = 0; i < 2; ++i)
    if (!ok(ragged())) return static_cast<int>(e);
  cudaEventRecord(t0, s);
  for (int i = 0; i < iters; ++i) ragged();
  cudaEventRecord(t1, s);
  if (!ok(cudaEventSynchronize(t1))) return static_cast<int>(e);
  cudaEventElapsedTime(ragged_ms, t0, t1);
  *ragged_ms /= iters;

  // The two outputs, element by element: the largest |difference|.
  std::vector<__nv_bfloat16> a(nq), c(nq);
  cudaMemcpy(a.data(), o_paged, nq * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(c.data(), o_ragged, nq * 2, cudaMemcpyDeviceToHost);
  float worst = 0.f;
  for (size_t i = 0; i < nq; ++i)
    worst = fmaxf(worst, fabsf(__bfloat162float(a[i]) - __bfloat162float(c[i])));
  *max_diff = worst;
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  for (void* x : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(v),
                  static_cast<void*>(kp), static_cast<void*>(vp), static_cast<void*>(o_paged),
                  static_cast<void*>(o_ragged), static_cast<void*>(lse),
                  static_cast<void*>(indices), float_ws, int_ws})
    cudaFree(x);
  cudaFreeHost(pinned);
  return static_cast<int>(cudaGetLastError());
}
