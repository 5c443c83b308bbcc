// Host stand-in for kernels/common.cuh (run.sh puts it beside copies of the kernel files):
// CUDA's keywords as host C++, a block's threads as fibers on the launching host thread
// (blocks one after the other; ifd::launch_cooperative runs every block at once),
// __syncthreads as a barrier over the block, warp shuffles as a barrier over the warp, bf16
// as round-to-nearest-even on f32 bits. A fiber runs until it waits (a barrier, a spin on
// another block's flag), then the next one runs: host threads instead cost a kernel context
// switch at every shuffle, minutes of system time over the suite. A block's own state (its
// barriers, its shuffles' slots, its dynamic shared memory) is reached through pointers the
// scheduler sets as it switches to one of its threads, so blocks may run side by side;
// `__shared__` variables are one object for every block, so a kernel launched cooperatively
// keeps its shared state in dynamic shared memory.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>
#include <functional>
#include <sys/mman.h>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __shared__ static thread_local_block
#define thread_local_block  // block-shared: blocks run one at a time
using std::max;
using std::min;

#include "inferd.h"

struct uint2 {
  uint32_t x, y;
};
struct uint4 {
  uint32_t x, y, z, w;
};
struct float2 {
  float x, y;
};
struct int2 {
  int x, y;
};
inline int2 make_int2(int x, int y) { return {x, y}; }
struct alignas(16) float4 {
  float x, y, z, w;
};

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct Idx {
  int x = 0, y = 0, z = 0;
};
inline thread_local Idx threadIdx;
inline thread_local Idx blockIdx;
inline Idx blockDim, gridDim;

using cudaStream_t = void*;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInvalidDevice = 101 };
inline int cudaGetLastError() { return 0; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
enum {
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaDevAttrMultiProcessorCount = 16
};
// The multiprocessors a test's device has (a few).
inline int emu_sm_count = 3;
// An H100/H200's shared memory: 227 KiB a block, 228 KiB a multiprocessor.
inline cudaError_t cudaDeviceGetAttribute(int* v, int attr, int) {
  *v = attr == cudaDevAttrMultiProcessorCount                ? emu_sm_count
       : attr == cudaDevAttrMaxSharedMemoryPerMultiprocessor ? 228 << 10
                                                             : 227 << 10;
  return cudaSuccess;
}
enum { cudaFuncAttributeNonPortableClusterSizeAllowed = 9 };
template <typename F> cudaError_t cudaFuncSetAttribute(F, int, int) { return cudaSuccess; }
// Launch configurations, as far as the occupancy queries of clusters read them.
enum cudaLaunchAttributeID { cudaLaunchAttributeClusterDimension = 4 };
struct cudaLaunchAttribute {
  cudaLaunchAttributeID id;
  struct {
    struct {
      unsigned x, y, z;
    } clusterDim;
  } val;
};
struct cudaLaunchConfig_t {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes = 0;
  cudaStream_t stream = nullptr;
  cudaLaunchAttribute* attrs = nullptr;
  unsigned numAttrs = 0;
};
// decode.cu's capacity query compiles here; no emulated test asks it (the policy that
// reads it is the Rust backend's): none.
template <typename F>
cudaError_t cudaOccupancyMaxActiveClusters(int* n, F, const cudaLaunchConfig_t*) {
  *n = 0;
  return cudaSuccess;
}
template <typename T> cudaError_t cudaMemcpyToSymbol(T& symbol, const void* src, size_t n) {
  std::memcpy(&symbol, src, n);
  return cudaSuccess;
}
// (The H200's figure for the tensor-core decode build at head_dim 128, 4 heads a group.)
template <typename F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int, size_t) {
  *n = 3;
  return cudaSuccess;
}
// Static shared memory is not tracked here: 0 bytes.
struct cudaFuncAttributes {
  size_t sharedSizeBytes = 0;
};
template <typename F> cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F) {
  *a = {};
  return cudaSuccess;
}

struct __nv_bfloat16 {
  uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return {static_cast<uint16_t>(u >> 16)};
}
inline float __bfloat162float(__nv_bfloat16 b) {
  uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Atomics (threads of one block share memory; blocks run one at a time).
#include <atomic>
#include <cfloat>
template <typename T>
T atomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v);
}
// Rounded arithmetic intrinsics: host IEEE operations (ISO C++ never contracts into FMA).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __expf(float x) { return std::exp(x); }  // the device's is approximate
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __double2float_rn(double a) { return static_cast<float>(a); }
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
using std::isfinite;
using std::isnan;
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <typename T>
T __ldcg(const T* p) {
  return *p;
}

struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline float2 __bfloat1622float2(__nv_bfloat162 v) {
  return {__bfloat162float(v.x), __bfloat162float(v.y)};
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return {__float2bfloat16(a), __float2bfloat16(b)};
}

namespace emu {
// Switches from the running fiber (a kernel's thread) to the scheduler, which runs the
// others before it comes back (see run_fibers below).
inline void yield();
// A barrier over fibers: a waiting thread yields until the phase it arrived in completes.
struct Barrier {
  int expected, arrived = 0;
  unsigned long phase = 0;
  explicit Barrier(int n) : expected(n) {}
  void arrive_and_wait() {
    const unsigned long p = phase;
    if (++arrived == expected) {
      arrived = 0;
      ++phase;
      return;
    }
    while (phase == p) yield();
  }
  // Arrives for this phase and leaves the barrier for the later ones (a thread returned).
  void arrive_and_drop() {
    if (arrived == --expected) {
      arrived = 0;
      ++phase;
    }
  }
};
// The running block's own state (see Block below), set as the scheduler switches to one of
// its threads.
inline thread_local Barrier* block_bar;
inline thread_local std::unique_ptr<Barrier>* warp_bars;
inline thread_local float* warp_slots;
inline thread_local unsigned* match_slots;
inline thread_local float* block_slots;
inline thread_local float* dyn_smem;
// Run at the start of every block, and at its pdl_wait (see ifd::pdl_wait), when set.
inline void (*on_block_start)() = nullptr;
inline void (*on_pdl_wait)() = nullptr;

// Thread-block clusters (see cooperative_groups.h here): blocks a cluster along x, which
// run of ifd::launch_cluster is going (0: a plain launch; 1 finds the shared objects blocks
// read of others in their cluster, 2 keeps each one's bytes as every block left it, 3
// reads those), and those objects.
inline unsigned cluster_size = 1;
inline int cluster_run = 0;
struct ClusterShared {
  const void* at;
  size_t bytes;
  std::vector<std::vector<char>> of_block;  // by the block's index in the grid
  std::vector<char> zeros;                   // what runs 1 and 2 read instead
};
inline std::vector<ClusterShared> cluster_shared;
inline size_t block_index() {
  return (static_cast<size_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
}
// Block `rank` of this block's cluster's copy of the shared object at p: in runs 1 and 2 a
// zeroed stand-in (what is computed from it is thrown away), in run 3 the copy run 2 left;
// the block's own object for its own rank.
template <typename T>
T* cluster_map(T* p, unsigned rank) {
  const unsigned own = static_cast<unsigned>(blockIdx.x) % cluster_size;
  if (rank == own) return p;
  const size_t block = block_index() - own + rank;
  auto it = std::find_if(cluster_shared.begin(), cluster_shared.end(),
                         [&](const ClusterShared& c) { return c.at == p; });
  if (it == cluster_shared.end()) {
    cluster_shared.push_back({p, sizeof(T), {}});
    it = cluster_shared.end() - 1;
    it->of_block.resize(static_cast<size_t>(gridDim.x) * gridDim.y * gridDim.z);
  }
  if (cluster_run == 3) {
    if (it->of_block.at(block).size() != sizeof(T)) std::abort();  // (not kept: cannot be)
    return reinterpret_cast<T*>(it->of_block.at(block).data());
  }
  if (it->zeros.size() != sizeof(T)) it->zeros.assign(sizeof(T), 0);
  return reinterpret_cast<T*>(it->zeros.data());
}
// After a block of run 2: its copies of the objects blocks read of others.
inline void keep_cluster_shared() {
  for (auto& c : cluster_shared) {
    const char* b = static_cast<const char*>(c.at);
    c.of_block.at(block_index()).assign(b, b + c.bytes);
  }
}
}  // namespace emu
#define __syncthreads() emu::block_bar->arrive_and_wait()

// The lanes of the calling warp holding the same value (the whole warp takes part).
inline unsigned __match_any_sync(unsigned, unsigned v) {
  const int t = threadIdx.x, w = t >> 5;
  emu::Barrier& bar = *emu::warp_bars[w];
  emu::match_slots[t] = v;
  bar.arrive_and_wait();
  unsigned m = 0;
  const int lanes = std::min(32, blockDim.x - 32 * w);
  for (int l = 0; l < lanes; ++l)
    if (emu::match_slots[w * 32 + l] == v) m |= 1u << l;
  bar.arrive_and_wait();
  return m;
}
// Warp shuffles: every lane posts its value, then reads its source lane's.
inline float __shfl_sync(unsigned, float v, int src) {
  const int t = threadIdx.x, w = t >> 5;
  emu::Barrier& bar = *emu::warp_bars[w];
  emu::warp_slots[t] = v;
  bar.arrive_and_wait();
  const float r = emu::warp_slots[w * 32 + (src & 31)];
  bar.arrive_and_wait();
  return r;
}
inline int __shfl_sync(unsigned, int v, int src) {
  const int t = threadIdx.x, w = t >> 5;
  emu::Barrier& bar = *emu::warp_bars[w];
  std::memcpy(&emu::warp_slots[t], &v, 4);
  bar.arrive_and_wait();
  int r;
  std::memcpy(&r, &emu::warp_slots[w * 32 + (src & 31)], 4);
  bar.arrive_and_wait();
  return r;
}
inline float __shfl_xor_sync(unsigned m, float v, int o) {
  return __shfl_sync(m, v, (threadIdx.x & 31) ^ o);
}
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_bars[threadIdx.x >> 5]->arrive_and_wait(); }
inline int __ffs(unsigned x) { return x ? __builtin_ctz(x) + 1 : 0; }

// Read-only loads: plain reads here.
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}

namespace ifd {
using bf16 = __nv_bfloat16;
inline uint4 load_stream(const uint4* p) { return *p; }
inline cudaStream_t as_stream(void* s) { return s; }
inline int launched() { return 0; }
inline void pdl_wait();
inline void pdl_begin() { pdl_wait(); }
inline unsigned long long global_ns() {
  return static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count());
}
inline void pdl_trigger() {}
// The kernels' profiling stamps (kernels/common.cuh): nothing here.
enum ProbeStage { kEntry = 0, kWaited = 1, kDone = 2 };
template <int UNIT>
inline void kprobe(ProbeStage) {}
#define IFD_KERNEL_PROBE_SETTER(name) \
  extern "C" int name(void*) { return 0; }
// The kernel before, finishing: a test may set emu::on_pdl_wait to write what that kernel
// writes (then whatever a block read before its wait is stale). Every thread of the block
// reaches the wait (it acts as a barrier here); the hook runs once, with all of them held.
inline void pdl_wait() {
  if (!emu::on_pdl_wait) return;
  emu::block_bar->arrive_and_wait();
  if (threadIdx.x == 0) emu::on_pdl_wait();
  emu::block_bar->arrive_and_wait();
}
// Bulk copies complete at once here; a barrier's word counts its completed phases.
inline void bar_init(uint64_t* bar, uint32_t) { std::atomic_ref<uint64_t>(*bar).store(0); }
inline void bar_init_fence() {}
inline uint64_t evict_first() { return 0; }
inline void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t) {
  if (bytes % 16 != 0 || reinterpret_cast<uintptr_t>(dst) % 16 || reinterpret_cast<uintptr_t>(src) % 16)
    std::abort();
  std::memcpy(dst, src, bytes);
  std::atomic_ref<uint64_t>(*bar).fetch_add(1);
}
inline void bar_wait(uint64_t* bar, uint32_t parity) {
  while ((std::atomic_ref<uint64_t>(*bar).load() & 1) == parity) emu::yield();
}
// A spinning thread lets the others run first (the one it waits for among them).
inline unsigned ld_acquire(const unsigned* p) {
  emu::yield();
  return std::atomic_ref<unsigned>(*const_cast<unsigned*>(p)).load(std::memory_order_acquire);
}
inline float silu_mul(float x, float u) { return x / (1.f + __expf(-x)) * u; }
// acc += the eight products of two vectors of eight bf16, in order.
inline float dot8(const uint4& w, const uint4& x, float acc) {
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&x);
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(a[i]), q = __bfloat1622float2(b[i]);
    acc = fmaf(p.x, q.x, acc);
    acc = fmaf(p.y, q.y, acc);
  }
  return acc;
}
inline void cp_async16(void* smem, const void* global) { std::memcpy(smem, global, 16); }
inline void cp_async4(void* smem, const void* global) { std::memcpy(smem, global, 4); }
inline void cp_async8(void* smem, const void* global) { std::memcpy(smem, global, 8); }
inline int atomic_add_acq_rel(int* p, int v) {
  return std::atomic_ref<int>(*p).fetch_add(v, std::memory_order_acq_rel);
}
inline void cp_async_wait_all() {}
inline void cp_async16_zfill(void* smem, const void* global, bool valid) {
  if (valid)
    std::memcpy(smem, global, 16);
  else
    std::memset(smem, 0, 16);
}
inline void cp_async_commit() {}
template <int N>
void cp_async_wait() {}

// Tensor-core fragments, warp-wide: every lane posts its operands, then computes its own
// part of the result from the whole warp's (the layouts of kernels/common.cuh).
namespace frag {
inline const void* ptr_slots[1024];
inline uint32_t frag_slots[1024][6];
inline float bf16_at(const void* p, int i) {
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
inline uint32_t pack2(float lo, float hi) {
  return static_cast<uint32_t>(__float2bfloat16(lo).bits) |
         static_cast<uint32_t>(__float2bfloat16(hi).bits) << 16;
}
// A lane's mma operands, posted for its warp: the warp's barrier, passed once all have.
inline emu::Barrier& post(const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int t = threadIdx.x;
  for (int i = 0; i < 4; ++i) frag_slots[t][i] = a[i];
  frag_slots[t][4] = b0;
  frag_slots[t][5] = b1;
  emu::Barrier& bar = *::emu::warp_bars[t >> 5];
  bar.arrive_and_wait();
  return bar;
}
inline float lo_of(uint32_t v) { return __bfloat162float({static_cast<uint16_t>(v & 0xffff)}); }
inline float hi_of(uint32_t v) { return __bfloat162float({static_cast<uint16_t>(v >> 16)}); }
}  // namespace frag
template <bool TRANS>
void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const int t = threadIdx.x, w = t >> 5, l = t & 31;
  emu::Barrier& bar = *::emu::warp_bars[w];
  frag::ptr_slots[t] = row;
  bar.arrive_and_wait();
  for (int m = 0; m < 4; ++m) {
    const void* const* rows = frag::ptr_slots + w * 32 + 8 * m;  // matrix m's rows
    if (TRANS)
      r[m] = frag::pack2(frag::bf16_at(rows[2 * (l % 4)], l / 4), frag::bf16_at(rows[2 * (l % 4) + 1], l / 4));
    else
      r[m] = frag::pack2(frag::bf16_at(rows[l / 4], 2 * (l % 4)), frag::bf16_at(rows[l / 4], 2 * (l % 4) + 1));
  }
  bar.arrive_and_wait();
}
inline void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int t = threadIdx.x, w = t >> 5, l = t & 31;
  emu::Barrier& bar = frag::post(a, b0, b1);
  float A[16][16], B[16][8];
  for (int s = 0; s < 32; ++s) {
    const uint32_t* f = frag::frag_slots[w * 32 + s];
    const int row = s / 4, k = 2 * (s % 4);
    for (int i = 0; i < 4; ++i) {  // a0: (row, k), a1: (row + 8, k), a2: (row, k + 8), a3: both
      const int rr = row + (i & 1) * 8, kk = k + (i >> 1) * 8;
      A[rr][kk] = frag::lo_of(f[i]);
      A[rr][kk + 1] = frag::hi_of(f[i]);
    }
    for (int i = 0; i < 2; ++i) {  // b0: (k, col s / 4), b1: (k + 8, col)
      B[k + 8 * i][row] = frag::lo_of(f[4 + i]);
      B[k + 8 * i + 1][row] = frag::hi_of(f[4 + i]);
    }
  }
  bar.arrive_and_wait();
  for (int i = 0; i < 4; ++i) {
    const int rr = l / 4 + (i >> 1) * 8, cc = 2 * (l % 4) + (i & 1);
    float acc = c[i];
    for (int k = 0; k < 16; ++k) acc += A[rr][k] * B[k][cc];
    c[i] = acc;
  }
}
inline uint32_t pack_bf16(float lo, float hi) { return frag::pack2(lo, hi); }
// tf32: f32 bits rounded to 10 mantissa bits, to nearest, ties away from zero (cvt.rna).
inline uint32_t tf32(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  if ((b & 0x7f800000u) != 0x7f800000u) b = (b + 0x1000u) & 0xffffe000u;
  return b;
}
inline float tf32_value(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}
inline void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int t = threadIdx.x, w = t >> 5, l = t & 31;
  emu::Barrier& bar = frag::post(a, b0, b1);
  float A[16][8], B[8][8];
  for (int s = 0; s < 32; ++s) {
    const uint32_t* f = frag::frag_slots[w * 32 + s];
    const int g = s / 4, i = s % 4;
    A[g][i] = tf32_value(f[0]);  // a0: (g, i), a1: (g + 8, i), a2: (g, i + 4), a3: both
    A[g + 8][i] = tf32_value(f[1]);
    A[g][i + 4] = tf32_value(f[2]);
    A[g + 8][i + 4] = tf32_value(f[3]);
    B[i][g] = tf32_value(f[4]);  // b0: (k i, column g), b1: (k i + 4, column g)
    B[i + 4][g] = tf32_value(f[5]);
  }
  bar.arrive_and_wait();
  for (int e = 0; e < 4; ++e) {
    const int rr = l / 4 + (e >> 1) * 8, cc = 2 * (l % 4) + (e & 1);
    float acc = c[e];
    for (int k = 0; k < 8; ++k) acc += A[rr][k] * B[k][cc];
    c[e] = acc;
  }
}
inline float4 lds4(const float* p) {
  float4 v;
  std::memcpy(&v, p, 16);
  return v;
}
inline float4 ldg4(const float* p) { return lds4(p); }
inline void sts4(float* p, float4 v) { std::memcpy(p, &v, 16); }

inline void store4(bf16* p, float a, float b, float c, float d) {
  const uint32_t w[2] = {pack_bf16(a, b), pack_bf16(c, d)};
  std::memcpy(p, w, 8);
}

// Every lane of the warp gets the sum (the lanes' values in lane order).
inline float warp_sum(float v) {
  const int t = threadIdx.x, w = t >> 5;
  emu::Barrier& bar = *emu::warp_bars[w];
  emu::warp_slots[t] = v;
  bar.arrive_and_wait();
  float s = 0.f;
  for (int l = 0; l < 32; ++l) s += emu::warp_slots[w * 32 + l];
  bar.arrive_and_wait();
  return s;
}
inline float warp_max(float v) {
  const int t = threadIdx.x, w = t >> 5;
  emu::Barrier& bar = *emu::warp_bars[w];
  emu::warp_slots[t] = v;
  bar.arrive_and_wait();
  float s = -INFINITY;
  for (int l = 0; l < 32; ++l) s = std::max(s, emu::warp_slots[w * 32 + l]);
  bar.arrive_and_wait();
  return s;
}

inline float load(const float* p) { return *p; }
inline float load(const bf16* p) { return __bfloat162float(*p); }
inline float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
inline float4 load4(const bf16* p) {
  // The device reads the four as one 8-byte load: a misaligned address is a fault there.
  if (reinterpret_cast<uintptr_t>(p) & 7) {
    std::fprintf(stderr, "load4: bf16 address %p is not 8-byte aligned\n", static_cast<const void*>(p));
    std::abort();
  }
  return float4{load(p), load(p + 1), load(p + 2), load(p + 3)};
}
inline void store(float* p, float v) { *p = v; }
inline void store(bf16* p, float v) { *p = __float2bfloat16(v); }

inline unsigned blocks_for(size_t n, unsigned threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// Sum over the block: every thread posts its value, then each adds them all in thread
// order (the device adds per warp, then the warps' sums).
inline float block_sum(float v) {
  emu::block_slots[threadIdx.x] = v;
  __syncthreads();
  float s = 0.f;
  for (int t = 0; t < blockDim.x; ++t) s += emu::block_slots[t];
  __syncthreads();
  return s;
}

}  // namespace ifd

namespace emu {
// One block's state: its barriers, its shuffles' and sums' slots, its dynamic shared memory.
struct Block {
  Barrier bar;
  std::vector<std::unique_ptr<Barrier>> warps;
  float warp_slots[1024];
  unsigned match_slots[1024];
  float block_slots[1024];
  alignas(16) float smem[(227 << 10) / 4];
  explicit Block(int threads) : bar(threads) {
    for (int w = 0; w < (threads + 31) / 32; ++w)
      warps.emplace_back(new Barrier(std::min(32, threads - 32 * w)));
  }
  // The code that runs from now on works for this block.
  void enter(Idx at) {
    blockIdx = at;
    block_bar = &bar;
    warp_bars = warps.data();
    emu::warp_slots = this->warp_slots;
    emu::match_slots = this->match_slots;
    emu::block_slots = this->block_slots;
    dyn_smem = smem;
  }
};

// Context switches between fibers. On x86-64 a switch saves the callee-saved registers on
// the stack it leaves and loads the other's (ucontext's swapcontext would also make a
// system call each time, to save the signal mask: about a minute of the suite).
#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
extern "C" void emu_switch(void** save_sp, void* load_sp);
asm(R"(
.text
.globl emu_switch
.type emu_switch, @function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch, .-emu_switch
)");
struct Context {
  void* sp = nullptr;
};
inline void switch_to(Context& from, Context& to) { emu_switch(&from.sp, to.sp); }
// A fresh context on [stack, stack + size) that enters entry() (which must never return):
// emu_switch pops six registers, then returns into entry as if it had been called.
inline void make_context(Context& c, char* stack, size_t size, void (*entry)()) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t{15};
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                          // entry's return address: none
  *--sp = reinterpret_cast<void*>(entry);   // emu_switch's
  for (int r = 0; r < 6; ++r) *--sp = nullptr;
  c.sp = sp;
}
#else
struct Context {
  ucontext_t uc;
};
inline void switch_to(Context& from, Context& to) {
  if (swapcontext(&from.uc, &to.uc) != 0) std::abort();
}
inline void make_context(Context& c, char* stack, size_t size, void (*entry)()) {
  if (getcontext(&c.uc) != 0) std::abort();
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

// A kernel's thread: its context, its place and its stack.
struct Fiber {
  Context ctx;
  Block* block;
  Idx at;
  int t;
  const std::function<void()>* run;
  bool done = false;
};
// Fiber stacks (256 KiB above a guard page), kept from one launch to the next.
constexpr size_t kStack = 256 << 10, kGuard = 4096;
inline std::vector<char*> stacks;
inline char* stack_for(size_t i) {
  while (stacks.size() <= i) {
    void* m = mmap(nullptr, kStack + kGuard, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED || mprotect(m, kGuard, PROT_NONE) != 0) std::abort();
    stacks.push_back(static_cast<char*>(m) + kGuard);
  }
  return stacks[i];
}
inline Context home;  // the scheduler's (the launching thread's)
inline Fiber* running = nullptr;
inline void yield() {
  if (!running) std::abort();  // a wait outside a kernel's thread
  switch_to(running->ctx, home);
}
// Thread t of its block: the kernel, then it leaves the barriers it would have reached had it
// not returned early; then back to the scheduler for good.
inline void fiber_main() {
  Fiber* f = running;
  (*f->run)();
  f->block->bar.arrive_and_drop();
  f->block->warps[f->t >> 5]->arrive_and_drop();
  f->done = true;
  switch_to(f->ctx, home);
  std::abort();  // (never resumed)
}
// Runs the fibers in turn, each until it waits or returns, until all have returned.
inline void run_fibers(std::vector<Fiber>& fs, const std::function<void()>& run) {
  for (size_t i = 0; i < fs.size(); ++i) {
    fs[i].run = &run;
    make_context(fs[i].ctx, stack_for(i), kStack, fiber_main);
  }
  for (size_t live = fs.size(); live;) {
    for (Fiber& f : fs) {
      if (f.done) continue;
      f.block->enter(f.at);
      threadIdx = {f.t, 0, 0};
      running = &f;
      switch_to(home, f.ctx);
      running = nullptr;
      if (f.done) --live;
    }
  }
}
inline void set_dims(dim3 grid, dim3 block) {
  gridDim = {static_cast<int>(grid.x), static_cast<int>(grid.y), static_cast<int>(grid.z)};
  blockDim = {static_cast<int>(block.x), 1, 1};
}
}  // namespace emu

namespace ifd {
// Runs the grid: blocks in order, each block's threads at once.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t, cudaStream_t,
            Args&&... args) {
  const int threads = static_cast<int>(block.x);
  emu::set_dims(grid, block);
  const std::function<void()> run = [&] { kernel(args...); };
  std::vector<emu::Fiber> fs(threads);
  for (unsigned bz = 0; bz < grid.z; ++bz)
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      const Idx at{static_cast<int>(bx), static_cast<int>(by), static_cast<int>(bz)};
      auto b = std::make_unique<emu::Block>(threads);
      b->enter(at);  // for on_block_start
      if (emu::on_block_start) emu::on_block_start();
      for (int t = 0; t < threads; ++t) fs[t] = emu::Fiber{{}, b.get(), at, t, nullptr};
      emu::run_fibers(fs, run);
      b->enter(at);
      if (emu::cluster_run == 2) emu::keep_cluster_shared();
    }
}
// Runs the grid with every block at once (a cooperative launch: blocks may wait for one
// another).
template <typename... Params, typename... Args>
void launch_cooperative(void (*kernel)(Params...), dim3 grid, dim3 block, size_t, cudaStream_t,
                        Args&&... args) {
  const int threads = static_cast<int>(block.x);
  emu::set_dims(grid, block);
  const std::function<void()> run = [&] { kernel(args...); };
  std::vector<std::unique_ptr<emu::Block>> blocks;
  std::vector<emu::Fiber> fs;
  for (unsigned bz = 0; bz < grid.z; ++bz)
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      const Idx at{static_cast<int>(bx), static_cast<int>(by), static_cast<int>(bz)};
      blocks.push_back(std::make_unique<emu::Block>(threads));
      for (int t = 0; t < threads; ++t) fs.push_back(emu::Fiber{{}, blocks.back().get(), at, t, nullptr});
    }
  emu::run_fibers(fs, run);
}
// `launch` in clusters of `cluster` blocks along x: the grid three times (see
// cooperative_groups.h here); the last run's results stand. One block a cluster: `launch`.
template <typename... Params, typename... Args>
void launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                    cudaStream_t s, unsigned cluster, Args&&... args) {
  if (cluster <= 1) return launch(kernel, grid, block, smem, s, args...);
  emu::cluster_size = cluster;
  emu::cluster_shared.clear();
  for (int run = 1; run <= 3; ++run) {
    emu::cluster_run = run;
    launch(kernel, grid, block, smem, s, args...);
  }
  emu::cluster_run = 0;
  emu::cluster_size = 1;
}
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
