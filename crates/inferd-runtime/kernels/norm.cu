// RMSNorm (Zhang & Sennrich, 2019): x / sqrt(mean(x^2) + eps) * w, in f32, written in
// bf16 for the matrix products that read it. One block per row; the fused variant adds
// the residual first and keeps the sum in x.
#include "common.cuh"

namespace {
using ifd::bf16;

__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                int cols, float eps, bf16* __restrict__ out) {
  ifd::pdl_begin();
  const size_t r = blockIdx.x;
  const float* row = x + r * cols;
  float ss = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += row[c] * row[c];
  const float inv = rsqrtf(ifd::block_sum(ss) / cols + eps);
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    out[r * cols + c] = __float2bfloat16(row[c] * inv * w[c]);
}

__global__ void add_rms_norm_kernel(float* __restrict__ x, const float* __restrict__ y,
                                    const float* __restrict__ w, int cols, float eps,
                                    bf16* __restrict__ out) {
  ifd::pdl_begin();
  const size_t r = blockIdx.x;
  float* row = x + r * cols;
  const float* yr = y + r * cols;
  float ss = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = row[c] + yr[c];
    row[c] = v;
    ss += v * v;
  }
  const float inv = rsqrtf(ifd::block_sum(ss) / cols + eps);
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    out[r * cols + c] = __float2bfloat16(row[c] * inv * w[c]);
}

// One warp per head slice.
__global__ void head_rms_norm_kernel(float* __restrict__ x, const float* __restrict__ w,
                                     int slices, int head_dim, float eps) {
  ifd::pdl_begin();
  const int s = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (s >= slices) return;
  float* v = x + static_cast<size_t>(s) * head_dim;
  float ss = 0.f;
  for (int i = lane; i < head_dim; i += 32) ss += v[i] * v[i];
  const float inv = rsqrtf(ifd::warp_sum(ss) / head_dim + eps);
  for (int i = lane; i < head_dim; i += 32) v[i] = v[i] * inv * w[i];
}

unsigned threads_for(int cols) { return cols >= 2048 ? 1024 : cols >= 512 ? 256 : 128; }
}  // namespace

extern "C" {

int ifd_rms_norm(const float* x, const float* w, int rows, int cols, float eps, void* out,
                 void* stream) {
  if (rows == 0) return 0;
  ifd::launch(rms_norm_kernel, rows, threads_for(cols), 0, ifd::as_stream(stream), x, w, cols, eps,
              static_cast<bf16*>(out));
  return ifd::launched();
}

int ifd_add_rms_norm(float* x, const float* y, const float* w, int rows, int cols, float eps,
                     void* out, void* stream) {
  if (rows == 0) return 0;
  ifd::launch(add_rms_norm_kernel, rows, threads_for(cols), 0, ifd::as_stream(stream), x, y, w,
              cols, eps, static_cast<bf16*>(out));
  return ifd::launched();
}

int ifd_head_rms_norm(float* x, const float* w, int slices, int head_dim, float eps,
                      void* stream) {
  if (slices == 0) return 0;
  const int per_block = 8;  // warps
  ifd::launch(head_rms_norm_kernel, (slices + per_block - 1) / per_block, per_block * 32, 0,
              ifd::as_stream(stream), x, w, slices, head_dim, eps);
  return ifd::launched();
}

}  // extern "C"
