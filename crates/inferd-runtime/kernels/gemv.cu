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

using ifd::dot8;

// Warp o's sums of row o of w (bf16 [out, k], k % 8 == 0) with each of the R rows of x
// (bf16 [R, k]): acc[r] on every lane (or nothing, false, where o >= out). The first loads
// of W are issued before the wait for the kernel before (programmatic dependent launch);
// every thread of the block waits, x is read only after.
template <int R, int kUnroll>
__device__ __forceinline__ bool row_sums(const bf16* __restrict__ x, const bf16* __restrict__ w,
                                         int k, int out, int o, float (&acc)[R]) {
  const int lane = threadIdx.x & 31;
  const int kv = k >> 3;  // 16-byte vectors in a row
  const uint4* wr = reinterpret_cast<const uint4*>(w) + static_cast<size_t>(o) * kv;
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  int i = lane;
  uint4 wv[kUnroll];
  const bool full = o < out && i + 32 * (kUnroll - 1) < kv;
  if (full) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(wr + i + 32 * u);
  }
  ifd::pdl_begin();
  ifd::kprobe<1>(ifd::kWaited);
  if (o >= out) return false;
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
  return true;
}

// x bf16 [R, k], w bf16 [out, k], bias f32 [out] or null -> y f32 [R, out]; k % 8 == 0.
// With `add` the product (bias included) is added to what y holds (a residual stream).
template <int R, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                const float* __restrict__ bias, float* __restrict__ y, int k, int out, int add) {
  ifd::kprobe<1>(ifd::kEntry);
  const int o = blockIdx.x * kWarps + (threadIdx.x >> 5);
  float acc[R];
  if (!row_sums<R, kUnroll>(x, w, k, out, o, acc)) return;
  if ((threadIdx.x & 31) == 0) {
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

// SwiGLU of a fused gate|up product in the product's kernel: w bf16 [2f, k] (gate rows,
// then up rows), bias f32 [2f] or null -> out bf16 [R, f] = silu(x·gateᵀ) ⊙ (x·upᵀ). A block
// takes kWarps / 2 columns c: its first half of warps their gate rows c, the second half
// their up rows f + c, each summed as gemv_kernel sums it; the two meet in shared memory,
// and out is what ifd_swiglu makes of gemv_kernel's f32 output, to the bit.
template <int R, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_swiglu_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                       const float* __restrict__ bias, bf16* __restrict__ out, int k, int f) {
  ifd::kprobe<1>(ifd::kEntry);
  constexpr int kCols = kWarps / 2;
  __shared__ float part[kWarps][R];  // [warp][row]: a warp's sums, bias added
  const int warp = threadIdx.x >> 5;
  const int c = blockIdx.x * kCols + warp % kCols;  // the column, of f
  const int o = c < f ? (warp < kCols ? c : f + c) : 2 * f;  // its row of w (2f: none)
  float acc[R];
  if (row_sums<R, kUnroll>(x, w, k, 2 * f, o, acc) && (threadIdx.x & 31) == 0) {
    const float b = bias ? bias[o] : 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) part[warp][r] = acc[r] + b;
  }
  __syncthreads();
  if (threadIdx.x < kCols * R) {
    const int j = threadIdx.x % kCols, r = threadIdx.x / kCols;
    const int cj = blockIdx.x * kCols + j;
    if (cj < f)
      out[static_cast<size_t>(r) * f + cj] = __float2bfloat16(ifd::silu_mul(part[j][r], part[kCols + j][r]));
  }
  ifd::kprobe<1>(ifd::kDone);
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

// gemv_swiglu_kernel at U loads in flight a lane, as `launch` picks U.
template <int R>
int launch_swiglu(const void* x, const void* w, const float* bias, void* out, int k, int f,
                  int loads, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((f + kWarps / 2 - 1) / (kWarps / 2));
  const auto go = [&](auto kernel) {
    ifd::launch(kernel, blocks, kWarps * 32, 0, s, static_cast<const bf16*>(x),
                static_cast<const bf16*>(w), bias, static_cast<bf16*>(out), k, f);
    return ifd::launched();
  };
  if constexpr (R <= 2)
    if (loads >= 16) return go(gemv_swiglu_kernel<R, 16>);
  if constexpr (R <= 4)
    if (loads >= 8) return go(gemv_swiglu_kernel<R, 8>);
  return go(gemv_swiglu_kernel<R, 4>);
}
}  // namespace

IFD_KERNEL_PROBE_SETTER(ifd_kernel_probe_gemv)

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

extern "C" int ifd_gemv_swiglu(const void* x, const void* w, const float* bias, void* out, int n,
                               int k, int f, int loads, void* stream) {
  const cudaStream_t s = ifd::as_stream(stream);
  if (n == 0 || f == 0) return 0;
  if (k % 8 != 0) return static_cast<int>(cudaErrorInvalidValue);
  switch (n) {
    case 1: return launch_swiglu<1>(x, w, bias, out, k, f, loads, s);
    case 2: return launch_swiglu<2>(x, w, bias, out, k, f, loads, s);
    case 3: return launch_swiglu<3>(x, w, bias, out, k, f, loads, s);
    case 4: return launch_swiglu<4>(x, w, bias, out, k, f, loads, s);
    case 5: return launch_swiglu<5>(x, w, bias, out, k, f, loads, s);
    case 6: return launch_swiglu<6>(x, w, bias, out, k, f, loads, s);
    case 7: return launch_swiglu<7>(x, w, bias, out, k, f, loads, s);
    case 8: return launch_swiglu<8>(x, w, bias, out, k, f, loads, s);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}
