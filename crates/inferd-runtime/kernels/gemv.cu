// Matrix-vector products for decode-sized batches: y[r, o] = x[r, :] · W[o, :] (+ b[o])
// for R ≤ 8 rows of x. Such a product is bound by reading W once: each warp streams a
// piece of one row of W with 16-byte loads that bypass L1 and applies every load to all R
// rows of x (read through L1, where they stay). A lane keeps U loads of W in flight (U · 512
// bytes a warp): the products of a decode step are small (an 8B model's are 34-201 MB, 8-50
// µs), so a kernel is over before many rounds of loads, and what a multiprocessor has in
// flight, not the number of rounds, sets how close it comes to the bandwidth.
// A long row (more than `part` 16-byte vectors) is cut into pieces taken by warps of one
// block side by side, each piece one round of loads where a warp would otherwise take the
// row in rounds, waiting for each before issuing the next (an 8B model's down projection,
// 12288 wide: three rounds in lockstep across the multiprocessor). Their sums meet in
// shared memory, added in the pieces' order. Only a launch that cuts rows takes shared
// memory: one with whole rows takes none, as before pieces (the same build with 32 bytes
// of static shared memory in every launch measured 0.2 ms slower a one-row 8B step on the
// H200, 4.85 against 4.65 ms; docs/gpu-notes.md, session 17).
// The sum of a row runs in a fixed order that depends on k and `part` alone, not on R, so a
// row's result is the same in any batch of up to 8 rows. A block's first loads of W are
// issued before it waits for the kernel before (see ifd::pdl_begin).
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

// How a block covers its rows: `pieces` warps a row (1-8), `rows` rows (8 / pieces, at
// least 1), each piece `span` 16-byte vectors of the row (a multiple of 32; the last
// piece may be shorter).
struct Cut {
  int pieces, rows, span;
};

// Pieces of about `part` vectors (0: whole rows), at most 8 a row.
inline Cut cut_rows(int kv, int part) {
  int pieces = part > 0 ? (kv + part - 1) / part : 1;
  if (pieces > kWarps) pieces = kWarps;
  if (pieces < 1) pieces = 1;
  int span = (kv + pieces - 1) / pieces;
  span = (span + 31) / 32 * 32;
  pieces = (kv + span - 1) / span;  // rounding up the span may leave a piece empty
  if (pieces < 1) pieces = 1;
  const int rows = kWarps / pieces > 0 ? kWarps / pieces : 1;
  return Cut{pieces, rows, span};
}

// x bf16 [R, k], w bf16 [out, k], bias f32 [out] or null -> y f32 [R, out]; k % 8 == 0.
// With `add` the product (bias included) is added to what y holds (a residual stream).
// Block: cut.rows × cut.pieces warps, warp (row j, piece p) = j · pieces + p; with pieces,
// dynamic shared memory of a float per (warp, row of x).
template <int R, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                const float* __restrict__ bias, float* __restrict__ y, int k, int out, int add,
                Cut cut) {
  ifd::kprobe<1>(ifd::kEntry);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int piece = warp % cut.pieces;
  const int o = blockIdx.x * cut.rows + warp / cut.pieces;
  const bool live = o < out;
  const int kv = k >> 3;  // 16-byte vectors in a row
  const int begin = piece * cut.span;
  const int end = begin + cut.span < kv ? begin + cut.span : kv;
  const uint4* wr = reinterpret_cast<const uint4*>(w) + static_cast<size_t>(live ? o : 0) * kv;
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  // The weights do not depend on the kernel before: the first loads of W are issued
  // before waiting for it (programmatic dependent launch), x is read only after.
  int i = begin + lane;
  uint4 wv[kUnroll];
  const bool full = live && i + 32 * (kUnroll - 1) < end;
  if (full) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(wr + i + 32 * u);
  }
  ifd::pdl_begin();
  ifd::kprobe<1>(ifd::kWaited);
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  if (live) {
    for (bool loaded = full; i + 32 * (kUnroll - 1) < end; i += 32 * kUnroll, loaded = false) {
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
    for (; i < end; i += 32) {
      const uint4 wt = load_stream(wr + i);
#pragma unroll
      for (int r = 0; r < R; ++r)
        acc[r] = dot8(wt, __ldg(xr + static_cast<size_t>(r) * kv + i), acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = ifd::warp_sum(acc[r]);
  if (cut.pieces > 1) {  // block-uniform
    extern __shared__ float smem[];  // a row's pieces' sums  [warps][R]
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < R; ++r) smem[warp * R + r] = acc[r];
    __syncthreads();
    if (piece != 0) return;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = acc[r];
      for (int p = 1; p < cut.pieces; ++p) s += smem[(warp + p) * R + r];
      acc[r] = s;
    }
  }
  if (live && lane == 0) {
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
             int add, Cut cut, cudaStream_t s) {
  const int warps = cut.rows * cut.pieces;
  const size_t smem = cut.pieces > 1 ? sizeof(float) * warps * R : 0;
  ifd::launch(gemv_kernel<R, U>, (out + cut.rows - 1) / cut.rows, warps * 32, smem, s,
              static_cast<const bf16*>(x), static_cast<const bf16*>(w), bias, y, k, out, add,
              cut);
  return ifd::launched();
}

// U loads in flight per lane: 4, 8 or 16 (more rows of x, fewer: their registers).
template <int R>
int launch(const void* x, const void* w, const float* bias, float* y, int k, int out, int loads,
           int add, Cut cut, cudaStream_t s) {
  if constexpr (R <= 2)
    if (loads >= 16) return launch_u<R, 16>(x, w, bias, y, k, out, add, cut, s);
  if constexpr (R <= 4)
    if (loads >= 8) return launch_u<R, 8>(x, w, bias, y, k, out, add, cut, s);
  return launch_u<R, 4>(x, w, bias, y, k, out, add, cut, s);
}
}  // namespace

IFD_KERNEL_PROBE_SETTER(ifd_kernel_probe_gemv)

extern "C" int ifd_gemv(const void* x, const void* w, const float* bias, float* y, int n,
                        int k, int out, int loads, int part, int add, void* stream) {
  const cudaStream_t s = ifd::as_stream(stream);
  if (n == 0 || out == 0) return 0;
  if (k % 8 != 0 || part < 0) return static_cast<int>(cudaErrorInvalidValue);
  const Cut c = cut_rows(k >> 3, part);
  switch (n) {
    case 1: return launch<1>(x, w, bias, y, k, out, loads, add, c, s);
    case 2: return launch<2>(x, w, bias, y, k, out, loads, add, c, s);
    case 3: return launch<3>(x, w, bias, y, k, out, loads, add, c, s);
    case 4: return launch<4>(x, w, bias, y, k, out, loads, add, c, s);
    case 5: return launch<5>(x, w, bias, y, k, out, loads, add, c, s);
    case 6: return launch<6>(x, w, bias, y, k, out, loads, add, c, s);
    case 7: return launch<7>(x, w, bias, y, k, out, loads, add, c, s);
    case 8: return launch<8>(x, w, bias, y, k, out, loads, add, c, s);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}
