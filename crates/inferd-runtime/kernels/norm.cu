// RMSNorm (Zhang & Sennrich, 2019): x / sqrt(mean(x^2) + eps) * w, in f32, written in
// bf16 for the matrix products that read it. One block per row; the fused variant adds
// the residual first and keeps the sum in x.
#include "common.cuh"

namespace {
using ifd::bf16;

// The 16-byte path (cols % 4 == 0, cols ≤ 4 · V · blockDim.x): each thread keeps the V
// groups of 4 values it owns (groups threadIdx.x + j · blockDim.x) in registers between
// the sum of squares and the scaling, so x is read once, and their weights, read before
// the wait for the kernel before; with RESIDUAL, y is added to x first and the sum
// written back.
template <int V, bool RESIDUAL>
__global__ void norm4_kernel(float* __restrict__ x, const float* __restrict__ y,
                             const float* __restrict__ w, int cols, float eps,
                             bf16* __restrict__ out) {
  ifd::kprobe<2>(ifd::kEntry);
  // The weights are no kernel's output: loaded before the wait for the kernel before.
  ifd::pdl_trigger();
  const int groups = cols >> 2;
  const float4* w4 = reinterpret_cast<const float4*>(w);
  float4 g[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    g[j] = c < groups ? w4[c] : float4{0.f, 0.f, 0.f, 0.f};
  }
  ifd::pdl_wait();
  ifd::kprobe<2>(ifd::kWaited);
  const size_t r = blockIdx.x;
  float4* row = reinterpret_cast<float4*>(x + r * cols);
  float4 v[V];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    v[j] = c < groups ? row[c] : float4{0.f, 0.f, 0.f, 0.f};
    if constexpr (RESIDUAL) {
      if (c < groups) {
        const float4 b = reinterpret_cast<const float4*>(y + r * cols)[c];
        v[j].x += b.x;
        v[j].y += b.y;
        v[j].z += b.z;
        v[j].w += b.w;
        row[c] = v[j];
      }
    }
    ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
  }
  const float inv = rsqrtf(ifd::block_sum(ss) / cols + eps);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    if (c >= groups) break;
    ifd::store4(out + r * cols + 4 * c, v[j].x * inv * g[j].x, v[j].y * inv * g[j].y,
                v[j].z * inv * g[j].z, v[j].w * inv * g[j].w);
  }
  ifd::kprobe<2>(ifd::kDone);
}

// Any width: one value per thread at a time, x read twice.
__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                int cols, float eps, bf16* __restrict__ out) {
  ifd::kprobe<2>(ifd::kEntry);
  ifd::pdl_begin();
  ifd::kprobe<2>(ifd::kWaited);
  const size_t r = blockIdx.x;
  const float* row = x + r * cols;
  float ss = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += row[c] * row[c];
  const float inv = rsqrtf(ifd::block_sum(ss) / cols + eps);
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    out[r * cols + c] = __float2bfloat16(row[c] * inv * w[c]);
  ifd::kprobe<2>(ifd::kDone);
}

__global__ void add_rms_norm_kernel(float* __restrict__ x, const float* __restrict__ y,
                                    const float* __restrict__ w, int cols, float eps,
                                    bf16* __restrict__ out) {
  ifd::kprobe<2>(ifd::kEntry);
  ifd::pdl_begin();
  ifd::kprobe<2>(ifd::kWaited);
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
  ifd::kprobe<2>(ifd::kDone);
}

// One warp per head slice.
__global__ void head_rms_norm_kernel(float* __restrict__ x, const float* __restrict__ w,
                                     int slices, int head_dim, float eps) {
  ifd::kprobe<2>(ifd::kEntry);
  ifd::pdl_begin();
  ifd::kprobe<2>(ifd::kWaited);
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

// Launches the 16-byte path when the row fits it (true), for x [rows, cols].
template <bool RESIDUAL>
bool launch_norm4(float* x, const float* y, const float* w, int rows, int cols, float eps,
                  bf16* out, cudaStream_t s) {
  const auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  if (cols % 4 != 0 || ((addr(x) | addr(y) | addr(w)) & 15) != 0 || (addr(out) & 7) != 0)
    return false;
  const int groups = cols / 4;
  // The fewest groups a thread (V) for at most 1024 threads, threads a multiple of 32.
  const int v = groups <= 1024 ? 1 : groups <= 2048 ? 2 : groups <= 4096 ? 4 : 0;
  if (v == 0) return false;
  const unsigned threads = static_cast<unsigned>(((groups + v - 1) / v + 31) / 32 * 32);
  if (v == 1)
    ifd::launch(norm4_kernel<1, RESIDUAL>, rows, threads, 0, s, x, y, w, cols, eps, out);
  else if (v == 2)
    ifd::launch(norm4_kernel<2, RESIDUAL>, rows, threads, 0, s, x, y, w, cols, eps, out);
  else
    ifd::launch(norm4_kernel<4, RESIDUAL>, rows, threads, 0, s, x, y, w, cols, eps, out);
  return true;
}
}  // namespace

IFD_KERNEL_PROBE_SETTER(ifd_kernel_probe_norm)

extern "C" {

int ifd_rms_norm(const float* x, const float* w, int rows, int cols, float eps, void* out,
                 void* stream) {
  if (rows == 0) return 0;
  const cudaStream_t s = ifd::as_stream(stream);
  // The 16-byte path does not write x without RESIDUAL.
  if (!launch_norm4<false>(const_cast<float*>(x), nullptr, w, rows, cols, eps,
                           static_cast<bf16*>(out), s))
    ifd::launch(rms_norm_kernel, rows, threads_for(cols), 0, s, x, w, cols, eps,
                static_cast<bf16*>(out));
  return ifd::launched();
}

int ifd_add_rms_norm(float* x, const float* y, const float* w, int rows, int cols, float eps,
                     void* out, void* stream) {
  if (rows == 0) return 0;
  const cudaStream_t s = ifd::as_stream(stream);
  if (!launch_norm4<true>(x, y, w, rows, cols, eps, static_cast<bf16*>(out), s))
    ifd::launch(add_rms_norm_kernel, rows, threads_for(cols), 0, s, x, y, w, cols, eps,
                static_cast<bf16*>(out));
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
