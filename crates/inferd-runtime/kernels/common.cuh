// Helpers shared by the kernel files.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "inferd.h"

namespace ifd {

using bf16 = __nv_bfloat16;

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// The launch's own error (bad configuration), else 0.
inline int launched() { return static_cast<int>(cudaGetLastError()); }

// Programmatic dependent launch (sm_90): every kernel of ours is launched by `launch`, so
// it may be scheduled while the kernel before it in the stream is still running, and
// begins with `pdl_begin`: it lets the next kernel be scheduled in turn, then waits until
// the previous kernel has finished and its writes are visible. Nothing before that wait
// touches memory, so the overlap hides launch and ramp-up time and never a dependency.
// (Kernels launched otherwise, cuBLASLt's and FlashInfer's, wait for the whole previous
// kernel as usual; CUDA graphs keep the programmatic edges.)
__device__ __forceinline__ void pdl_begin() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
// pdl_begin in two halves, for a kernel that reads memory no kernel of the pass writes
// (weights, KV rows of earlier passes, the pass's metadata) before it waits.
__device__ __forceinline__ void pdl_trigger() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Asynchronous global -> shared copies (sm_80+): 16 or 4 bytes, both addresses aligned
// to the size; complete after cp_async_wait_all (each thread waits for its own).
__device__ __forceinline__ void cp_async16(void* smem, const void* global) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(global) : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* global) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(global) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
}

// kernel<<<grid, block, smem, s>>>(args...) with programmatic stream serialization allowed;
// errors are left for `launched`.
template <typename... Params, typename... Args>
inline void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<Args&&>(args)...);
}

inline unsigned blocks_for(size_t n, unsigned threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // `part` may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int nw = blockDim.x >> 5;
  float t = lane < nw ? part[lane] : 0.f;
  return warp_sum(t);
}

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const bf16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(bf16* p, float v) { *p = __float2bfloat16(v); }

}  // namespace ifd
