// The Gated DeltaNet's kernels around its delta rule (delta_rule.cu): the causal depthwise
// convolution + SiLU through each chunk's conv state, the per-head L2 norm, the decay and
// beta gates, the gated RMSNorm, and two pieces of Qwen3.5's gated attention (the q|gate
// split and the sigmoid output gate). Each computes what the CPU backend's op computes
// (src/backend/cpu/{conv,delta_net}.rs), in the same order where it matters.
#include "common.cuh"

namespace {
using ifd::bf16;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// One thread per (token, channel). Token t of chunk c (its local index i = t - first)
// reads the extended input row e = i + tap (0..hist are the conv state's rows, oldest
// first; zeros at position 0; hist = taps - 1), the sum in tap order.
__global__ void conv_kernel(const float* __restrict__ x, const float* __restrict__ w,
                            const float* __restrict__ state, const int32_t* __restrict__ chunks,
                            const int32_t* __restrict__ seq, int n_tokens, int dim, int taps,
                            float* __restrict__ out) {
  ifd::pdl_begin();
  const size_t n = static_cast<size_t>(n_tokens) * dim;
  const int hist = taps - 1;
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int t = static_cast<int>(k / dim), ch = static_cast<int>(k % dim);
    const int32_t* c = chunks + 4 * seq[t];
    const int first = c[0], start = c[2], slot = c[3];
    const bool zero = start == 0 || slot < 0;
    const float* st = zero ? nullptr : state + static_cast<size_t>(slot) * hist * dim;
    const int i = t - first;
    float acc = 0.f;
    for (int tap = 0; tap < taps; ++tap) {
      const int e = i + tap;
      float xv;
      if (e >= hist)
        xv = x[static_cast<size_t>(first + e - hist) * dim + ch];
      else
        xv = zero ? 0.f : st[static_cast<size_t>(e) * dim + ch];
      acc += w[static_cast<size_t>(ch) * taps + tap] * xv;
    }
    out[k] = acc / (1.f + expf(-acc));  // SiLU
  }
}

// One thread per (chunk, channel): the state after the chunk, its last hist rows of
// [state; x], read into registers before any is written.
constexpr int kMaxHist = 8;
__global__ void conv_state_kernel(const float* __restrict__ x, float* __restrict__ state,
                                  const int32_t* __restrict__ chunks, int n_chunks, int dim,
                                  int hist) {
  ifd::pdl_begin();
  const size_t n = static_cast<size_t>(n_chunks) * dim;
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int ci = static_cast<int>(k / dim), ch = static_cast<int>(k % dim);
    const int32_t* c = chunks + 4 * ci;
    const int first = c[0], len = c[1], start = c[2], slot = c[3];
    if (slot < 0) continue;  // a padding row keeps no state
    float* st = state + static_cast<size_t>(slot) * hist * dim;
    float kept[kMaxHist];
    for (int j = 0; j < hist; ++j) {
      const int e = len + j;  // extended index of the kept row (the chunk ends at hist + len)
      if (e >= hist)
        kept[j] = x[static_cast<size_t>(first + e - hist) * dim + ch];
      else
        kept[j] = start == 0 ? 0.f : st[static_cast<size_t>(e) * dim + ch];
    }
    for (int j = 0; j < hist; ++j) st[static_cast<size_t>(j) * dim + ch] = kept[j];
  }
}

// One warp per d-slice: x * rsqrt(Σx² + eps) * scale, in place.
__global__ void l2_norm_kernel(float* __restrict__ x, int slices, int d, float eps,
                               float scale) {
  ifd::pdl_begin();
  const int s = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (s >= slices) return;
  float* v = x + static_cast<size_t>(s) * d;
  float ss = 0.f;
  for (int i = lane; i < d; i += 32) ss += v[i] * v[i];
  const float inv = 1.f / sqrtf(ifd::warp_sum(ss) + eps);
  for (int i = lane; i < d; i += 32) v[i] = v[i] * inv * scale;
}

// torch's softplus (beta 1, threshold 20).
__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

__global__ void gates_kernel(const float* __restrict__ a, const float* __restrict__ b,
                             const float* __restrict__ a_log, const float* __restrict__ dt_bias,
                             size_t n, int heads, float* __restrict__ g,
                             float* __restrict__ beta) {
  ifd::pdl_begin();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int h = static_cast<int>(i % heads);
    g[i] = -expf(a_log[h]) * softplus(a[i] + dt_bias[h]);
    beta[i] = sigmoid(b[i]);
  }
}

// One warp per d-slice: w * (x * rsqrt(mean(x²) + eps)) * silu(z), written in bf16 (the
// output projection's input).
__global__ void gated_rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ z,
                                      const float* __restrict__ w, int slices, int d, float eps,
                                      bf16* __restrict__ out) {
  ifd::pdl_begin();
  const int s = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (s >= slices) return;
  const size_t base = static_cast<size_t>(s) * d;
  float ss = 0.f;
  for (int i = lane; i < d; i += 32) ss += x[base + i] * x[base + i];
  const float r = 1.f / sqrtf(ifd::warp_sum(ss) / d + eps);
  for (int i = lane; i < d; i += 32) {
    const float zv = z[base + i];
    out[base + i] = __float2bfloat16(w[i] * (x[base + i] * r) * (zv * sigmoid(zv)));
  }
}

// x [rows, heads * 2d] -> a, b [rows, heads * d]: each 2d slice's halves.
__global__ void split_pairs_kernel(const float* __restrict__ x, size_t n, int d,
                                   float* __restrict__ a, float* __restrict__ b) {
  ifd::pdl_begin();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t slice = i / d, e = i % d;  // slice = row * heads + head
    a[i] = x[slice * 2 * d + e];
    b[i] = x[slice * 2 * d + d + e];
  }
}

template <typename T>
__global__ void sigmoid_mul_kernel(T* __restrict__ x, const float* __restrict__ gate, size_t n) {
  ifd::pdl_begin();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    ifd::store(x + i, ifd::load(x + i) * sigmoid(gate[i]));
}

unsigned grid_for(size_t n) {
  const size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65535 * 16 ? (b ? b : 1) : 65535 * 16);
}
}  // namespace

extern "C" {

int ifd_causal_conv1d_silu(const float* x, const float* w, float* state, const int32_t* chunks,
                           int n_chunks, const int32_t* seq, int n_tokens, int dim, int taps,
                           float* out, void* stream) {
  if (n_tokens == 0 || dim == 0) return 0;
  if (taps < 1 || taps - 1 > kMaxHist) return static_cast<int>(cudaErrorInvalidValue);
  const cudaStream_t s = ifd::as_stream(stream);
  const size_t n = static_cast<size_t>(n_tokens) * dim;
  ifd::launch(conv_kernel, grid_for(n), 256, 0, s, x, w, state, chunks, seq, n_tokens, dim, taps,
              out);
  if (taps > 1) {
    const size_t m = static_cast<size_t>(n_chunks) * dim;
    ifd::launch(conv_state_kernel, grid_for(m), 256, 0, s, x, state, chunks, n_chunks, dim,
                taps - 1);
  }
  return ifd::launched();
}

int ifd_l2_norm_heads(float* x, int slices, int d, float eps, float scale, void* stream) {
  if (slices == 0) return 0;
  const int per_block = 8;  // warps
  ifd::launch(l2_norm_kernel, (slices + per_block - 1) / per_block, per_block * 32, 0,
              ifd::as_stream(stream), x, slices, d, eps, scale);
  return ifd::launched();
}

int ifd_delta_gates(const float* a, const float* b, const float* a_log, const float* dt_bias,
                    int rows, int heads, float* g, float* beta, void* stream) {
  const size_t n = static_cast<size_t>(rows) * heads;
  if (n == 0) return 0;
  ifd::launch(gates_kernel, grid_for(n), 256, 0, ifd::as_stream(stream), a, b, a_log, dt_bias, n,
              heads, g, beta);
  return ifd::launched();
}

int ifd_gated_rms_norm(const float* x, const float* z, const float* w, int slices, int d,
                       float eps, void* out, void* stream) {
  if (slices == 0) return 0;
  const int per_block = 8;
  ifd::launch(gated_rms_norm_kernel, (slices + per_block - 1) / per_block, per_block * 32, 0,
              ifd::as_stream(stream), x, z, w, slices, d, eps, static_cast<bf16*>(out));
  return ifd::launched();
}

int ifd_split_head_pairs(const float* x, int rows, int heads, int d, float* a, float* b,
                         void* stream) {
  const size_t n = static_cast<size_t>(rows) * heads * d;
  if (n == 0) return 0;
  ifd::launch(split_pairs_kernel, grid_for(n), 256, 0, ifd::as_stream(stream), x, n, d, a, b);
  return ifd::launched();
}

int ifd_sigmoid_mul(void* x, int x_bf16, const float* gate, size_t n, void* stream) {
  if (n == 0) return 0;
  const cudaStream_t s = ifd::as_stream(stream);
  if (x_bf16)
    ifd::launch(sigmoid_mul_kernel<bf16>, grid_for(n), 256, 0, s, static_cast<bf16*>(x), gate, n);
  else
    ifd::launch(sigmoid_mul_kernel<float>, grid_for(n), 256, 0, s, static_cast<float*>(x), gate, n);
  return ifd::launched();
}

}  // extern "C"
