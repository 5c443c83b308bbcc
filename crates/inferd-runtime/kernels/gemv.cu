// Matrix-vector products for decode-sized batches: y[r, o] = x[r, :] · W[o, :] (+ b[o])
// for R ≤ 8 rows of x. Such a product is bound by reading W once: each warp streams one
// row of W with 16-byte loads that bypass L1 and applies every load to all R rows of x
// (read through L1, where they stay). A lane keeps U loads of W in flight (U · 512 bytes
// a warp): the products of a decode step are small (an 8B model's are 34-201 MB, 8-50 µs),
// so a kernel is over before many rounds of loads, and what a multiprocessor has in
// flight, not the number of rounds, sets how close it comes to the bandwidth. The sum of a row runs in a fixed order that does
// not depend on R, so a row's result is the same in any batch of up to 8 rows. A block's
// first loads of W are issued before it waits for the kernel before (see ifd::pdl_begin).
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

// The warp's dot products of one row of W (wr, kv 16-byte vectors) with the R rows of x
// (xr), each summed over the warp (every lane gets acc[r]); `valid`: the warp has a row
// (else acc is 0). The first loads of W are issued before waiting for the kernel before
// (programmatic dependent launch), which every thread does; x is read only after.
template <int R, int kUnroll>
__device__ __forceinline__ void row_dots(const uint4* __restrict__ xr, const uint4* __restrict__ wr,
                                         int kv, bool valid, float (&acc)[R]) {
  const int lane = threadIdx.x & 31;
  int i = lane;
  uint4 wv[kUnroll];
  const bool full = valid && i + 32 * (kUnroll - 1) < kv;
  if (full) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(wr + i + 32 * u);
  }
  ifd::pdl_begin();
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  if (!valid) return;
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
}

// x bf16 [R, k], w bf16 [out, k], bias f32 [out] or null -> y f32 [R, out]; k % 8 == 0.
// With `add` the product (bias included) is added to what y holds (a residual stream).
template <int R, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                const float* __restrict__ bias, float* __restrict__ y, int k, int out, int add) {
  const int o = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int kv = k >> 3;  // 16-byte vectors in a row
  const uint4* wr = reinterpret_cast<const uint4*>(w) + static_cast<size_t>(o) * kv;
  float acc[R];
  row_dots<R, kUnroll>(reinterpret_cast<const uint4*>(x), wr, kv, o < out, acc);
  if (o >= out || (threadIdx.x & 31) != 0) return;
  const float b = bias ? bias[o] : 0.f;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float* yo = y + static_cast<size_t>(r) * out + o;
    const float v = acc[r] + b;
    *yo = add ? *yo + v : v;
  }
}

// SwiGLU in the fused gate|up product's epilogue: w bf16 [2f, k] (gate rows, then up rows),
// x bf16 [R, k] -> out bf16 [R, f], out[r, c] = silu(x_r · w_c) * (x_r · w_{f+c}). A block's
// first half of warps takes gate rows c0..c0+3, its second half the up rows f+c0..; the
// pairs meet in shared memory. The same sums and formula as the product then ifd_swiglu,
// so the same bits, without writing the product out and reading it back.
constexpr int kPairs = kWarps / 2;  // outputs a block

template <int R, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_swiglu_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w, int k, int f,
                       bf16* __restrict__ out) {
  __shared__ float part[kWarps][R];
  const int warp = threadIdx.x >> 5;
  const int c = blockIdx.x * kPairs + warp % kPairs;  // the output column
  const int o = warp < kPairs ? c : f + c;           // the row of w
  const int kv = k >> 3;
  const uint4* wr = reinterpret_cast<const uint4*>(w) + static_cast<size_t>(o) * kv;
  float acc[R];
  row_dots<R, kUnroll>(reinterpret_cast<const uint4*>(x), wr, kv, c < f, acc);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) part[warp][r] = acc[r];
  }
  __syncthreads();
  const int t = threadIdx.x;  // (r, pair) = (t / kPairs, t % kPairs)
  if (t >= R * kPairs) return;
  const int r = t / kPairs, p = t % kPairs, col = blockIdx.x * kPairs + p;
  if (col >= f) return;
  const float g = part[p][r], u = part[kPairs + p][r];
  out[static_cast<size_t>(r) * f + col] = __float2bfloat16(g / (1.f + __expf(-g)) * u);
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
template <int R, int U>
int launch_swiglu_u(const void* x, const void* w, int k, int f, void* out, cudaStream_t s) {
  ifd::launch(gemv_swiglu_kernel<R, U>, (f + kPairs - 1) / kPairs, kWarps * 32, 0, s,
              static_cast<const bf16*>(x), static_cast<const bf16*>(w), k, f,
              static_cast<bf16*>(out));
  return ifd::launched();
}

template <int R>
int launch_swiglu(const void* x, const void* w, int k, int f, int loads, void* out,
                  cudaStream_t s) {
  if constexpr (R <= 2)
    if (loads >= 16) return launch_swiglu_u<R, 16>(x, w, k, f, out, s);
  if constexpr (R <= 4)
    if (loads >= 8) return launch_swiglu_u<R, 8>(x, w, k, f, out, s);
  return launch_swiglu_u<R, 4>(x, w, k, f, out, s);
}
}  // namespace

extern "C" int ifd_gemv_swiglu(const void* x, const void* w, int n, int k, int f, int loads,
                               void* out, void* stream) {
  const cudaStream_t s = ifd::as_stream(stream);
  if (n == 0 || f == 0) return 0;
  if (k % 8 != 0) return static_cast<int>(cudaErrorInvalidValue);
  switch (n) {
    case 1: return launch_swiglu<1>(x, w, k, f, loads, out, s);
    case 2: return launch_swiglu<2>(x, w, k, f, loads, out, s);
    case 3: return launch_swiglu<3>(x, w, k, f, loads, out, s);
    case 4: return launch_swiglu<4>(x, w, k, f, loads, out, s);
    case 5: return launch_swiglu<5>(x, w, k, f, loads, out, s);
    case 6: return launch_swiglu<6>(x, w, k, f, loads, out, s);
    case 7: return launch_swiglu<7>(x, w, k, f, loads, out, s);
    case 8: return launch_swiglu<8>(x, w, k, f, loads, out, s);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

extern "C" int ifd_gemv(const void* x, const void* w, const float* bias, float* y, int n,
                        int k, int out, int loads, int add, void* stream) {
  const cudaStream_t s = ifd::as_stream(stream);
  if (n == 0 || out == 0) return 0;
  if (k % 8 != 0) return static_cast<int>(cudaErrorInvalidValue);
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
