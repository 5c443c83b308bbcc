// Rotary position embedding (RoFormer) in place, from per-position angle tables that
// the host fills once (the same f32 values the CPU backend uses).
#include "common.cuh"

namespace {
// One thread per (row, head, pair).
__global__ void rope_kernel(float* __restrict__ x, int rows, int cols, int head_dim, int half,
                            int neox, const int32_t* __restrict__ pos,
                            const float* __restrict__ cos_tab, const float* __restrict__ sin_tab) {
  ifd::pdl_begin();
  const int heads = cols / head_dim;
  const size_t n = static_cast<size_t>(rows) * heads * half;
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(k % half);
    const size_t rh = k / half;  // row * heads + head
    const size_t r = rh / heads;
    float* h = x + r * cols + (rh % heads) * head_dim;
    const size_t p = static_cast<size_t>(pos[r]) * half + i;
    const float c = cos_tab[p], s = sin_tab[p];
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = h[a], x1 = h[b];
    h[a] = x0 * c - x1 * s;
    h[b] = x0 * s + x1 * c;
  }
}
}  // namespace

extern "C" int ifd_rope(float* x, int rows, int cols, int head_dim, int half, int neox,
                        const int32_t* pos, const float* cos_tab, const float* sin_tab,
                        void* stream) {
  const size_t n = static_cast<size_t>(rows) * (cols / head_dim) * half;
  if (n == 0) return 0;
  const size_t b = (n + 255) / 256;
  ifd::launch(rope_kernel, static_cast<unsigned>(b < 1u << 20 ? b : 1u << 20), 256, 0,
              ifd::as_stream(stream), x, rows, cols, head_dim, half, neox, pos, cos_tab, sin_tab);
  return ifd::launched();
}
