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
