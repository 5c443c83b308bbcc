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

// x bf16 [R, k], w bf16 [out, k], bias f32 [out] or null -> y f32 [R, out]; k % 8 == 0.
template <int R, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                const float* __restrict__ bias, float* __restrict__ y, int k, int out) {
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
    for (int r = 0; r < R; ++r) y[static_cast<size_t>(r) * out + o] = acc[r] + b;
  }
}

// The tensor-core build, for up to 8 · NT rows of x and k % 64 == 0. A block computes a tile
// of 16 outputs as m16n8k16 products: the tile's 16 rows of W are the A operand, x's rows
// (zero beyond n) the B operand's NT groups of 8 columns. Lane (g = lane / 4, c = lane % 4)
// loads, of each 64-value chunk of k, the 16-byte pieces k 8c..8c+8 and 32+8c..32+8c+8 of
// W's rows g and g + 8 (a quad's four lanes read 64 contiguous bytes of a row a load), and
// the same pieces of x's row g: a sum over k does not care which of its terms an mma adds
// where, so the pieces go into the fragments as they are loaded, W from global memory
// straight to registers, and x is read once for every two loads of W whatever the rows.
// The 8 warps of a block share the tile's k in contiguous runs of chunks and add their
// partials in shared memory in warp order: a row's result does not depend on n.
constexpr int kTile = 16;  // outputs a block

template <int NT, int kChunks>  // NT: groups of 8 rows of x; kChunks: chunks a round
__global__ void __launch_bounds__(kWarps * 32, 2)
    gemv_mma_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                    const float* __restrict__ bias, float* __restrict__ y, int n, int k,
                    int out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int o0 = blockIdx.x * kTile;
  const int chunks = k >> 6, kv = k >> 3;  // 64-value chunks, 16-byte pieces a row
  const int j0 = warp * chunks / kWarps, j1 = (warp + 1) * chunks / kWarps;
  // Rows g and g + 8 of the tile (past the last output: the last row, loaded and unused).
  const uint4* wa = reinterpret_cast<const uint4*>(w) + static_cast<size_t>(min(o0 + g, out - 1)) * kv + c;
  const uint4* wb = reinterpret_cast<const uint4*>(w) + static_cast<size_t>(min(o0 + g + 8, out - 1)) * kv + c;
  uint4 wv[kChunks][4];  // a round's pieces: row g (k 8c.., 32+8c..), row g + 8 (the same)
  const auto load_round = [&](int j) {
#pragma unroll
    for (int u = 0; u < kChunks; ++u)
      if (j + u < j1) {
        const int at = 8 * (j + u);
        wv[u][0] = load_stream(wa + at);
        wv[u][1] = load_stream(wa + at + 4);
        wv[u][2] = load_stream(wb + at);
        wv[u][3] = load_stream(wb + at + 4);
      }
  };
  // The weights do not depend on the kernel before: the first round is loaded before
  // waiting for it (programmatic dependent launch), x only after.
  load_round(j0);
  ifd::pdl_begin();
  float acc[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
  for (int j = j0; j < j1; j += kChunks) {
    if (j != j0) load_round(j);
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      if (j + u >= j1) break;
      const int at = 8 * (j + u) + c;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const int r = 8 * t + g;  // x's row in B's column g of group t
        const uint4* xr = reinterpret_cast<const uint4*>(x) + static_cast<size_t>(r) * kv + at;
        const uint4 x0 = r < n ? __ldg(xr) : uint4{0u, 0u, 0u, 0u};
        const uint4 x1 = r < n ? __ldg(xr + 4) : uint4{0u, 0u, 0u, 0u};
        const uint4 &a0 = wv[u][0], &a1 = wv[u][1], &b0 = wv[u][2], &b1 = wv[u][3];
        ifd::mma_bf16(acc[t], {a0.x, b0.x, a0.y, b0.y}, x0.x, x0.y);
        ifd::mma_bf16(acc[t], {a0.z, b0.z, a0.w, b0.w}, x0.z, x0.w);
        ifd::mma_bf16(acc[t], {a1.x, b1.x, a1.y, b1.y}, x1.x, x1.y);
        ifd::mma_bf16(acc[t], {a1.z, b1.z, a1.w, b1.w}, x1.z, x1.w);
      }
    }
  }
  // acc[t]: (tile row g, x rows 8t + 2c and + 1), (tile row g + 8, the same).
  __shared__ float part[kWarps][kTile][8 * NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    part[warp][g][8 * t + 2 * c] = acc[t][0];
    part[warp][g][8 * t + 2 * c + 1] = acc[t][1];
    part[warp][g + 8][8 * t + 2 * c] = acc[t][2];
    part[warp][g + 8][8 * t + 2 * c + 1] = acc[t][3];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kTile * 8 * NT; e += kWarps * 32) {
    const int row = e % kTile, r = e / kTile, o = o0 + row;
    if (r >= n || o >= out) continue;
    float s = 0.f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) s += part[v][row][r];
    y[static_cast<size_t>(r) * out + o] = s + (bias ? bias[o] : 0.f);
  }
}

template <int NT>
int launch_mma(const void* x, const void* w, const float* bias, float* y, int n, int k,
               int out, cudaStream_t s) {
  ifd::launch(gemv_mma_kernel<NT, 4>, (out + kTile - 1) / kTile, kWarps * 32, 0, s,
              static_cast<const bf16*>(x), static_cast<const bf16*>(w), bias, y, n, k, out);
  return ifd::launched();
}

template <int R, int U>
int launch_u(const void* x, const void* w, const float* bias, float* y, int k, int out,
             cudaStream_t s) {
  ifd::launch(gemv_kernel<R, U>, (out + kWarps - 1) / kWarps, kWarps * 32, 0, s,
              static_cast<const bf16*>(x), static_cast<const bf16*>(w), bias, y, k, out);
  return ifd::launched();
}

// U loads in flight per lane: 4, 8 or 16 (more rows of x, fewer: their registers).
template <int R>
int launch(const void* x, const void* w, const float* bias, float* y, int k, int out, int loads,
           cudaStream_t s) {
  if constexpr (R <= 2)
    if (loads >= 16) return launch_u<R, 16>(x, w, bias, y, k, out, s);
  if constexpr (R <= 4)
    if (loads >= 8) return launch_u<R, 8>(x, w, bias, y, k, out, s);
  return launch_u<R, 4>(x, w, bias, y, k, out, s);
}
}  // namespace

extern "C" int ifd_gemv(const void* x, const void* w, const float* bias, float* y, int n,
                        int k, int out, int loads, void* stream) {
  const cudaStream_t s = ifd::as_stream(stream);
  if (n == 0 || out == 0) return 0;
  if (k % 8 != 0) return static_cast<int>(cudaErrorInvalidValue);
  switch (n) {
    case 1:
      return launch<1>(x, w, bias, y, k, out, loads, s);
    case 2: return launch<2>(x, w, bias, y, k, out, loads, s);
    case 3: return launch<3>(x, w, bias, y, k, out, loads, s);
    case 4: return launch<4>(x, w, bias, y, k, out, loads, s);
    case 5: return launch<5>(x, w, bias, y, k, out, loads, s);
    case 6: return launch<6>(x, w, bias, y, k, out, loads, s);
    case 7: return launch<7>(x, w, bias, y, k, out, loads, s);
    case 8: return launch<8>(x, w, bias, y, k, out, loads, s);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

extern "C" int ifd_gemv_mma(const void* x, const void* w, const float* bias, float* y, int n,
                            int k, int out, void* stream) {
  const cudaStream_t s = ifd::as_stream(stream);
  if (n == 0 || out == 0) return 0;
  if (k % 64 != 0 || n > 32) return static_cast<int>(cudaErrorInvalidValue);
  if (n <= 8) return launch_mma<1>(x, w, bias, y, n, k, out, s);
  if (n <= 16) return launch_mma<2>(x, w, bias, y, n, k, out, s);
  return launch_mma<4>(x, w, bias, y, n, k, out, s);
}
