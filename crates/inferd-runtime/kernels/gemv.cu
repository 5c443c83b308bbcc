// Matrix-vector products for decode-sized batches: y[r, o] = x[r, :] · W[o, :] (+ b[o])
// for R ≤ 8 rows of x. Such a product is bound by reading W once: each warp streams one
// row of W with 16-byte loads that bypass L1 and applies every load to all R rows of x
// (read through L1, where they stay). A lane keeps U loads of W in flight (U · 512 bytes
// a warp): the products of a decode step are small (an 8B model's are 34-201 MB, 8-50 µs),
// so a kernel is over before many rounds of loads, and what a multiprocessor has in
// flight, not the number of rounds, sets how close it comes to the bandwidth. The sum of a row runs in a fixed order that does
// not depend on R, so a row's result is the same in any batch of up to 8 rows. A block's
// first loads of W are issued before it waits for the kernel before (see ifd::pdl_begin).
// That is the wave schedule (a block of warps a few rows, as many blocks as rows need);
// the streaming schedule below (one or two rows) keeps W's bytes in flight through shared
// memory instead, and sums in the same order.
#include "common.cuh"

namespace {
using ifd::bf16;

constexpr int kWarps = 8;  // output rows per block, one per warp

using ifd::load_stream;

// acc += Σ of the eight products of two vectors of eight bf16.
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

// x bf16 [R, k], w bf16 [out, k], bias f32 [out] or null -> y f32 [R, out]; k % 8 == 0.
// With `add` the product (bias included) is added to what y holds (a residual stream).
template <int R, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                const float* __restrict__ bias, float* __restrict__ y, int k, int out, int add) {
  ifd::kprobe<1>(ifd::kEntry);
  const int lane = threadIdx.x & 31;
  const int o = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int kv = k >> 3;  // 16-byte vectors in a row
  const uint4* wr = reinterpret_cast<const uint4*>(w) + static_cast<size_t>(o) * kv;
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  // The weights do not depend on the kernel before: the first loads of W are issued
  // before waiting for it (programmatic dependent launch), x is read only after.
  int i = lane;
  uint4 wv[kUnroll];
  const bool full = o < out && i + 32 * (kUnroll - 1) < kv;
  if (full) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(wr + i + 32 * u);
  }
  ifd::pdl_begin();
  ifd::kprobe<1>(ifd::kWaited);
  if (o >= out) return;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  for (bool loaded = full; i + 32 * (kUnroll - 1) < kv; i += 32 * kUnroll, loaded = false) {
    if (!loaded) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(wr + i + 32 * u);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r)
        acc[r] = dot8(wv[u], __ldg(xr + static_cast<size_t>(r) * kv + i + 32 * u), acc[r]);
  }
  for (; i < kv; i += 32) {
    const uint4 wt = load_stream(wr + i);
#pragma unroll
    for (int r = 0; r < R; ++r)
      acc[r] = dot8(wt, __ldg(xr + static_cast<size_t>(r) * kv + i), acc[r]);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = ifd::warp_sum(acc[r]);
  if (lane == 0) {
    const float b = bias ? bias[o] : 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float* yo = y + static_cast<size_t>(r) * out + o;
      const float v = acc[r] + b;
      *yo = add ? *yo + v : v;
    }
  }
  ifd::kprobe<1>(ifd::kDone);
}

// The streaming schedule (one or two rows of x): one block a multiprocessor, each warp
// taking a contiguous run of W's rows, which reach it through a ring of kStages bulk copies
// of up to kPiece bytes (a row in pieces), so that each multiprocessor keeps
// kStreamWarps · kStages · kPiece bytes in flight from start to end with no waves, and
// issues one instruction a piece where the wave kernel issues one a lane and 16 bytes.
// x sits in shared memory. A lane takes the same elements of a row in the same order as
// in the wave kernel, so the two give the same bits.
constexpr int kStreamWarps = 8;
constexpr int kStages = 4;
constexpr int kPiece = 4096;  // bytes
constexpr size_t kRing = static_cast<size_t>(kStreamWarps) * kStages * kPiece;

template <int R>
__global__ void __launch_bounds__(kStreamWarps * 32, 1)
    gemv_stream_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                       const float* __restrict__ bias, float* __restrict__ y, int k, int out,
                       int add) {
  ifd::kprobe<1>(ifd::kEntry);
  extern __shared__ float smem[];
  // ring: [kStreamWarps][kStages][kPiece] bytes of W; then xs: bf16 [R, k]
  unsigned char* const ring = reinterpret_cast<unsigned char*>(smem);
  const uint4* const xs = reinterpret_cast<const uint4*>(ring + kRing);
  __shared__ uint64_t full[kStreamWarps][kStages];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kv = k >> 3;  // 16-byte vectors in a row
  const size_t row_bytes = static_cast<size_t>(k) * sizeof(bf16);
  const int pieces = static_cast<int>((row_bytes + kPiece - 1) / kPiece);
  // This warp's rows [o0, o1): the grid's warps split W evenly.
  const long long warps = static_cast<long long>(gridDim.x) * kStreamWarps;
  const long long gw = static_cast<long long>(blockIdx.x) * kStreamWarps + warp;
  const int o0 = static_cast<int>(out * gw / warps), o1 = static_cast<int>(out * (gw + 1) / warps);
  const int items = (o1 - o0) * pieces;  // pieces this warp streams, in order
  unsigned char* const mine = ring + static_cast<size_t>(warp) * kStages * kPiece;
  const unsigned char* const src = reinterpret_cast<const unsigned char*>(w) + o0 * row_bytes;
  uint64_t policy = 0;
  const auto issue = [&](int item) {  // lane 0: piece `item` into its stage
    const int j = item % pieces;
    const size_t at = static_cast<size_t>(item / pieces) * row_bytes + static_cast<size_t>(j) * kPiece;
    const size_t left = row_bytes - static_cast<size_t>(j) * kPiece;
    const uint32_t bytes = static_cast<uint32_t>(left < kPiece ? left : kPiece);
    ifd::bulk_load(mine + (item % kStages) * kPiece, src + at, bytes, &full[warp][item % kStages],
                   policy);
  };
  // W does not depend on the kernel before: the first pieces are on their way before the
  // wait for it; x only after.
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) ifd::bar_init(&full[warp][s], 1);
    ifd::bar_init_fence();
    policy = ifd::evict_first();
    for (int item = 0; item < min(kStages, items); ++item) issue(item);
  }
  ifd::pdl_begin();
  ifd::kprobe<1>(ifd::kWaited);
  {
    const uint4* xg = reinterpret_cast<const uint4*>(x);
    uint4* xw = reinterpret_cast<uint4*>(ring + kRing);
    for (int i = threadIdx.x; i < R * kv; i += kStreamWarps * 32) xw[i] = __ldg(xg + i);
  }
  __syncthreads();  // x in place; also every warp's barriers initialized before any waits
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  for (int item = 0; item < items; ++item) {
    const int stage = item % kStages, j = item % pieces;
    ifd::bar_wait(&full[warp][stage], (item / kStages) & 1);
    const uint4* wp = reinterpret_cast<const uint4*>(mine + stage * kPiece);
    const int v0 = j * (kPiece / 16);  // the piece's first vector in the row
    const int nv = min(kPiece / 16, kv - v0);
#pragma unroll
    for (int u = 0; u < kPiece / 16 / 32; ++u) {
      const int v = lane + 32 * u;
      if (v < nv) {
        const uint4 wt = wp[v];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = dot8(wt, xs[static_cast<size_t>(r) * kv + v0 + v], acc[r]);
      }
    }
    __syncwarp();  // every lane is done with the stage before it is refilled
    if (lane == 0 && item + kStages < items) issue(item + kStages);
    if (j == pieces - 1) {
      const int o = o0 + item / pieces;
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] = ifd::warp_sum(acc[r]);
      if (lane == 0) {
        const float b = bias ? bias[o] : 0.f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float* yo = y + static_cast<size_t>(r) * out + o;
          const float v = acc[r] + b;
          *yo = add ? *yo + v : v;
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] = 0.f;
    }
  }
  ifd::kprobe<1>(ifd::kDone);
}

// The streaming schedule's launch, or -1 where it does not take the shape (more than two
// rows, rows shorter than a piece, x too large for shared memory beside the ring).
template <int R>
int launch_stream(const void* x, const void* w, const float* bias, float* y, int k, int out,
                  int add, cudaStream_t s) {
  const size_t smem = kRing + static_cast<size_t>(R) * k * sizeof(bf16);
  if (static_cast<size_t>(k) * sizeof(bf16) < kPiece || smem > ifd::max_smem_optin()) return -1;
  static int sms = 0;
  if (sms == 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return ifd::launched();
  }
  static size_t opted = 0;  // the dynamic shared memory opted in to so far
  if (smem > opted) {
    const cudaError_t e = cudaFuncSetAttribute(gemv_stream_kernel<R>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
    if (e != cudaSuccess) return static_cast<int>(e);
    opted = smem;
  }
  ifd::launch(gemv_stream_kernel<R>, sms, kStreamWarps * 32, smem, s, static_cast<const bf16*>(x),
              static_cast<const bf16*>(w), bias, y, k, out, add);
  return ifd::launched();
}

template <int R, int U>
int launch_u(const void* x, const void* w, const float* bias, float* y, int k, int out,
             int add, cudaStream_t s) {
  ifd::launch(gemv_kernel<R, U>, (out + kWarps - 1) / kWarps, kWarps * 32, 0, s,
              static_cast<const bf16*>(x), static_cast<const bf16*>(w), bias, y, k, out, add);
  return ifd::launched();
}

// U loads in flight per lane: 4, 8 or 16 (more rows of x, fewer: their registers).
template <int R>
int launch(const void* x, const void* w, const float* bias, float* y, int k, int out, int loads,
           int add, cudaStream_t s) {
  if constexpr (R <= 2)
    if (loads >= 16) return launch_u<R, 16>(x, w, bias, y, k, out, add, s);
  if constexpr (R <= 4)
    if (loads >= 8) return launch_u<R, 8>(x, w, bias, y, k, out, add, s);
  return launch_u<R, 4>(x, w, bias, y, k, out, add, s);
}
}  // namespace

IFD_KERNEL_PROBE_SETTER(ifd_kernel_probe_gemv)

extern "C" int ifd_gemv(const void* x, const void* w, const float* bias, float* y, int n,
                        int k, int out, int loads, int add, void* stream) {
  const cudaStream_t s = ifd::as_stream(stream);
  if (n == 0 || out == 0) return 0;
  if (k % 8 != 0) return static_cast<int>(cudaErrorInvalidValue);
  // loads 0: the streaming schedule where it takes the shape, else 16 loads a lane.
  if (loads == 0) {
    if (n <= 2) {
      const int e = n == 1 ? launch_stream<1>(x, w, bias, y, k, out, add, s)
                           : launch_stream<2>(x, w, bias, y, k, out, add, s);
      if (e >= 0) return e;
    }
    loads = 16;
  }
  switch (n) {
    case 1:
      return launch<1>(x, w, bias, y, k, out, loads, add, s);
    case 2: return launch<2>(x, w, bias, y, k, out, loads, add, s);
    case 3: return launch<3>(x, w, bias, y, k, out, loads, add, s);
    case 4: return launch<4>(x, w, bias, y, k, out, loads, add, s);
    case 5: return launch<5>(x, w, bias, y, k, out, loads, add, s);
    case 6: return launch<6>(x, w, bias, y, k, out, loads, add, s);
    case 7: return launch<7>(x, w, bias, y, k, out, loads, add, s);
    case 8: return launch<8>(x, w, bias, y, k, out, loads, add, s);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}
