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

// The GPU's global timer in ns (profiling only: it ticks coarser than a cycle).
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Profiling only (`cuda_check kernels`): when this unit's region is set, thread 0 of each
// block of its kernels appends (global timer ns, what) records at the block's stages:
// kEntry, kWaited (its wait for the kernel before returned), kDone (its work written).
// A region: [0] records so far, [1] room (records), then 2 words a record; what = unit << 56
// | stage << 48 | the grid's blocks << 24 | the block's index in it (x fastest, then y, z).
// Each file of kernels has its own region
// (IFD_KERNEL_PROBE_SETTER), set and read by the host between passes.
// Compiled in only with IFD_KERNEL_PROBE (cargo feature `kernel-probe`): elsewhere kprobe
// is nothing and the setters say cudaErrorNotSupported.
enum ProbeStage { kEntry = 0, kWaited = 1, kDone = 2 };
#ifdef IFD_KERNEL_PROBE
static __device__ unsigned long long* g_kernel_probe;
template <int UNIT>
__device__ __forceinline__ void kprobe(ProbeStage stage) {
  if (threadIdx.x != 0) return;
  unsigned long long* const p = g_kernel_probe;
  if (p == nullptr) return;
  const unsigned long long t = global_ns();
  const unsigned long long i = atomicAdd(p, 1ull);
  if (i >= p[1]) return;
  p[2 + 2 * i] = t;
  const unsigned long long blocks = static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z;
  const unsigned long long block =
      (static_cast<unsigned long long>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  p[3 + 2 * i] = static_cast<unsigned long long>(UNIT) << 56 |
                 static_cast<unsigned long long>(stage) << 48 | (blocks & 0xffffff) << 24 |
                 (block & 0xffffff);
}
#define IFD_KERNEL_PROBE_SETTER(name)                                          \
  extern "C" int name(void* region) {                                          \
    return static_cast<int>(cudaMemcpyToSymbol(ifd::g_kernel_probe, &region, sizeof region)); \
  }
#else
template <int UNIT>
__device__ __forceinline__ void kprobe(ProbeStage) {}
#define IFD_KERNEL_PROBE_SETTER(name) \
  extern "C" int name(void*) { return static_cast<int>(cudaErrorNotSupported); }
#endif

// 16 bytes of memory no kernel of the pass writes (weights), read once: not kept in L1.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Bulk copies into shared memory (sm_90: the TMA engine copies one contiguous range, no
// tensor map), each completing on an mbarrier in shared memory that counts its bytes. A
// barrier's phases alternate parity: bar_wait(bar, p) returns once the phase of parity p
// is over. bar_init by one thread, then bar_init_fence before any thread uses it.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bar_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrivals)
               : "memory");
}
__device__ __forceinline__ void bar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// An L2 policy for data read once (weights): evicted first.
__device__ __forceinline__ uint64_t evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
// bytes (a multiple of 16; both addresses 16-byte aligned) from src to dst, completing the
// barrier's current phase (its one arrival is this call's).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar, uint64_t policy) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// A counter in global memory read with acquire semantics at GPU scope (what another
// block wrote before its release is visible after).
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

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
// A GPU-scope add with acquire and release semantics; the value before it.
__device__ __forceinline__ int atomic_add_acq_rel(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ void cp_async8(void* smem, const void* global) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(s), "l"(global) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
}
// 16 bytes, or 16 zero bytes where !valid (the source is not read then).
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* global, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(global),
               "r"(valid ? 16 : 0)
               : "memory");
}
// Groups: a thread's copies since its last commit form one; wait until at most N of its
// groups are still in flight.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Tensor cores (warp-wide). ldmatrix: four 8x8 bf16 matrices from shared memory, lane
// 8m + i giving the address of row i of matrix m; lane t receives (row t / 4, columns
// 2 (t % 4) and + 1) of each, or with TRANS the transposed pair (rows 2 (t % 4) and + 1,
// column t / 4).
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
// c[16x8] += a[16x16] · b[16x8], bf16 in, f32 accumulate. Lane t holds a: (row t / 4,
// k 2 (t % 4) and + 1), (row + 8, same), (row, k + 8), (row + 8, k + 8); b: (k 2 (t % 4) and
// + 1, column t / 4), (k + 8, same); c: (row t / 4, columns 2 (t % 4) and + 1), (row + 8, same).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4],
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// x rounded to tf32 (10 mantissa bits, to nearest, ties away), as mma_tf32's operand bits.
__device__ __forceinline__ uint32_t tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
// c[16x8] += a[16x8] · b[8x8], tf32 in, f32 accumulate. Lane t (g = t / 4, i = t % 4) holds
// a: (row g, k i), (row g + 8, k i), (row g, k i + 4), (row g + 8, k i + 4); b: (k i, column
// g), (k i + 4, column g); c: (row g, columns 2i and 2i + 1), (row g + 8, same).
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Four floats at a 16-byte aligned address: from shared memory, from global memory (through
// L1), into shared memory.
__device__ __forceinline__ float4 lds4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ float4 ldg4(const float* p) {
  return __ldg(reinterpret_cast<const float4*>(p));
}
__device__ __forceinline__ void sts4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// p[0..4) = a, b, c, d rounded to bf16, in one 8-byte store (p 8-byte aligned).
__device__ __forceinline__ void store4(bf16* p, float a, float b, float c, float d) {
  *reinterpret_cast<uint2*>(p) = uint2{pack_bf16(a, b), pack_bf16(c, d)};
}

// kernel<<<grid, block, smem, s>>>(args...) with the launch attributes attr[0, n); errors
// are left for `launched`.
template <typename... Params, typename... Args>
inline void launch_with(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                        cudaStream_t s, cudaLaunchAttribute* attr, unsigned n, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<Args&&>(args)...);
}
// The same with programmatic stream serialization allowed and, with `cluster` > 1, in
// thread-block clusters of that many blocks along x (the grid's x a multiple of it; above
// 8 the kernel must allow non-portable sizes).
template <typename... Params, typename... Args>
inline void launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                           cudaStream_t s, unsigned cluster, Args&&... args) {
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = cluster;
  attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = 1;
  launch_with(kernel, grid, block, smem, s, attr, cluster > 1 ? 2 : 1,
              static_cast<Args&&>(args)...);
}
template <typename... Params, typename... Args>
inline void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   Args&&... args) {
  launch_cluster(kernel, grid, block, smem, s, 1, static_cast<Args&&>(args)...);
}
// Launched cooperatively: every block resident at once (or the launch fails), so blocks
// may wait for one another.
template <typename... Params, typename... Args>
inline void launch_cooperative(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                               cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  launch_with(kernel, grid, block, smem, s, attr, 1, static_cast<Args&&>(args)...);
}

inline unsigned blocks_for(size_t n, unsigned threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// SwiGLU's gate: silu(x) · u (fused.cu's SwiGLU, gemv.cu's in its product).
__device__ __forceinline__ float silu_mul(float x, float u) { return x / (1.f + __expf(-x)) * u; }

// acc += the eight products of two vectors of eight bf16, in order (the matrix-vector
// kernels' sum: gemv.cu, chain.cu).
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x, float acc) {
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(a[i]), q = __bfloat1622float2(b[i]);
    acc = fmaf(p.x, q.x, acc);
    acc = fmaf(p.y, q.y, acc);
  }
  return acc;
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
// Four consecutive values as floats: f32 from a 16-byte aligned address, bf16 from an
// 8-byte aligned one.
__device__ __forceinline__ float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ float4 load4(const bf16* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  return float4{a.x, a.y, b.x, b.y};
}
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(bf16* p, float v) { *p = __float2bfloat16(v); }

// Shared memory a block of this device may opt in to, in bytes (0 when it cannot be read).
inline size_t max_smem_optin() {
  int dev = 0, bytes = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<size_t>(bytes);
}

}  // namespace ifd
