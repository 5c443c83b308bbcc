// Element-wise and row-copy kernels: embedding lookup, SwiGLU gating, residual add,
// column slices (splitting fused projections) and row gathers.
#include "common.cuh"

namespace {
using ifd::bf16;

// A pass's first kernel: it lets the next kernel launch only once it has waited for all
// work queued before it (block copies, the block tables' scatter, the drawn tokens), so
// every later kernel of the pass may read that work before its own programmatic wait
// (the decode attention reads its block tables and older K/V rows there).
__global__ void embed_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ tokens,
                             int cols, float* __restrict__ out) {
  ifd::pdl_wait();
  ifd::pdl_trigger();
  const size_t t = blockIdx.x;
  const bf16* row = table + static_cast<size_t>(tokens[t]) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    out[t * cols + c] = __bfloat162float(row[c]);
}

__global__ void silu_mul_kernel(const float* __restrict__ g, const float* __restrict__ u,
                                size_t n, bf16* __restrict__ out) {
  ifd::pdl_begin();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = g[i];
    out[i] = __float2bfloat16(x / (1.f + __expf(-x)) * u[i]);
  }
}

__global__ void add_kernel(float* __restrict__ x, const float* __restrict__ y, size_t n) {
  ifd::pdl_begin();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

__global__ void copy_cols_kernel(const float* __restrict__ x, int x_cols, int col0, int width,
                                 float* __restrict__ out) {
  ifd::pdl_begin();
  const size_t r = blockIdx.x;
  for (int c = threadIdx.x; c < width; c += blockDim.x)
    out[r * width + c] = x[r * x_cols + col0 + c];
}

__global__ void gather_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ idx,
                                   int cols, float* __restrict__ out) {
  ifd::pdl_begin();
  const size_t i = blockIdx.x;
  const float* row = x + static_cast<size_t>(idx[i]) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[i * cols + c] = row[c];
}

unsigned grid_for(size_t n) {
  const size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65535 * 16 ? (b ? b : 1) : 65535 * 16);
}
}  // namespace

extern "C" {

int ifd_embed(const void* table, const int32_t* tokens, int n, int cols, float* out,
              void* stream) {
  if (n == 0) return 0;
  ifd::launch(embed_kernel, n, 256, 0, ifd::as_stream(stream), static_cast<const bf16*>(table),
              tokens, cols, out);
  return ifd::launched();
}

int ifd_silu_mul(const float* gate, const float* up, size_t n, void* out, void* stream) {
  if (n == 0) return 0;
  ifd::launch(silu_mul_kernel, grid_for(n), 256, 0, ifd::as_stream(stream), gate, up, n,
              static_cast<bf16*>(out));
  return ifd::launched();
}

int ifd_add(float* x, const float* y, size_t n, void* stream) {
  if (n == 0) return 0;
  ifd::launch(add_kernel, grid_for(n), 256, 0, ifd::as_stream(stream), x, y, n);
  return ifd::launched();
}

int ifd_copy_cols(const float* x, int rows, int x_cols, int col0, int width, float* out,
                  void* stream) {
  if (rows == 0 || width == 0) return 0;
  ifd::launch(copy_cols_kernel, rows, 256, 0, ifd::as_stream(stream), x, x_cols, col0, width, out);
  return ifd::launched();
}

int ifd_gather_rows(const float* x, const int32_t* idx, int n, int cols, float* out,
                    void* stream) {
  if (n == 0) return 0;
  ifd::launch(gather_rows_kernel, n, 256, 0, ifd::as_stream(stream), x, idx, cols, out);
  return ifd::launched();
}

}  // extern "C"
