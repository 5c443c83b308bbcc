// Fusions of the small steps between matrix products, which decode passes otherwise pay
// for in kernel launches: full attention's inputs from the fused Q|K|V projection (split,
// per-head RMSNorm, rotary positions in one pass) and SwiGLU from the fused gate|up
// projection. Each computes what the separate kernels compute, in the same order.
#include "common.cuh"

namespace {
using ifd::bf16;

constexpr int kWarps = 8;       // heads per block, one per warp
constexpr int kMaxHeadDim = 256;

// One warp per (row, head) of qkv f32 [rows, (hq + 2 hkv) * d]. A q or k head is
// RMS-normed by its weight (when given), then rotated over its first 2 * half dims at
// the row's position; v heads are copied.
//   -> q [rows, hq * d] (f32 or bf16), k, v f32 [rows, hkv * d]
template <typename Q>
__global__ void __launch_bounds__(kWarps * 32)
    qkv_prep_kernel(const float* __restrict__ qkv, int rows, int hq, int hkv, int d,
                    const float* __restrict__ qn, const float* __restrict__ kn, float eps,
                    int half, int neox, const int32_t* __restrict__ pos,
                    const float* __restrict__ cos_tab, const float* __restrict__ sin_tab,
                    Q* __restrict__ q, float* __restrict__ k, float* __restrict__ v) {
  ifd::pdl_begin();
  __shared__ float head[kWarps][kMaxHeadDim];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int heads = hq + 2 * hkv;
  const size_t g = static_cast<size_t>(blockIdx.x) * kWarps + warp;  // row * heads + head
  if (g >= static_cast<size_t>(rows) * heads) return;
  const size_t r = g / heads;
  const int h = static_cast<int>(g % heads);
  const float* src = qkv + g * d;
  if (h >= hq + hkv) {
    float* dst = v + (r * hkv + (h - hq - hkv)) * d;
    for (int i = lane; i < d; i += 32) dst[i] = src[i];
    return;
  }
  const float* w = h < hq ? qn : kn;
  float* sh = head[warp];
  if (w) {
    float ss = 0.f;
    for (int i = lane; i < d; i += 32) ss += src[i] * src[i];
    const float inv = rsqrtf(ifd::warp_sum(ss) / d + eps);
    for (int i = lane; i < d; i += 32) sh[i] = src[i] * inv * w[i];
  } else {
    for (int i = lane; i < d; i += 32) sh[i] = src[i];
  }
  __syncwarp();
  const float* c = cos_tab + static_cast<size_t>(pos[r]) * half;
  const float* s = sin_tab + static_cast<size_t>(pos[r]) * half;
  for (int i = lane; i < d; i += 32) {
    float val = sh[i];
    if (i < 2 * half) {
      // The pair (a, b) that i belongs to, and its angle j.
      const int j = neox ? (i < half ? i : i - half) : i >> 1;
      const int a = neox ? j : 2 * j, b = neox ? j + half : 2 * j + 1;
      const float x0 = sh[a], x1 = sh[b];
      val = i == a ? x0 * c[j] - x1 * s[j] : x0 * s[j] + x1 * c[j];
    }
    if (h < hq)
      ifd::store(q + (r * hq + h) * d + i, val);
    else
      k[(r * hkv + (h - hq)) * d + i] = val;
  }
}

// out[r, c] = silu(gu[r, c]) * gu[r, f + c]   gu f32 [rows, 2f] -> out bf16 [rows, f]
__global__ void swiglu_kernel(const float* __restrict__ gu, size_t rows, int f,
                              bf16* __restrict__ out) {
  ifd::pdl_begin();
  const size_t n = rows * f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / f, c = i % f;
    const float x = gu[r * 2 * f + c];
    out[i] = __float2bfloat16(x / (1.f + __expf(-x)) * gu[r * 2 * f + f + c]);
  }
}
}  // namespace

extern "C" {

int ifd_qkv_prep(const float* qkv, int rows, int hq, int hkv, int head_dim, const float* q_norm,
                 const float* k_norm, float eps, int half, int neox, const int32_t* pos,
                 const float* cos_tab, const float* sin_tab, void* q, int q_bf16, float* k,
                 float* v, void* stream) {
  const size_t warps = static_cast<size_t>(rows) * (hq + 2 * hkv);
  if (warps == 0) return 0;
  if (head_dim > kMaxHeadDim || 2 * half > head_dim) return static_cast<int>(cudaErrorInvalidValue);
  const unsigned blocks = static_cast<unsigned>((warps + kWarps - 1) / kWarps);
  const cudaStream_t s = ifd::as_stream(stream);
  if (q_bf16)
    ifd::launch(qkv_prep_kernel<bf16>, blocks, kWarps * 32, 0, s, qkv, rows, hq, hkv, head_dim,
                q_norm, k_norm, eps, half, neox, pos, cos_tab, sin_tab, static_cast<bf16*>(q), k,
                v);
  else
    ifd::launch(qkv_prep_kernel<float>, blocks, kWarps * 32, 0, s, qkv, rows, hq, hkv, head_dim,
                q_norm, k_norm, eps, half, neox, pos, cos_tab, sin_tab, static_cast<float*>(q), k,
                v);
  return ifd::launched();
}

int ifd_swiglu(const float* gate_up, int rows, int f, void* out, void* stream) {
  const size_t n = static_cast<size_t>(rows) * f;
  if (n == 0) return 0;
  const size_t b = (n + 255) / 256;
  ifd::launch(swiglu_kernel, static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16), 256, 0,
              ifd::as_stream(stream), gate_up, rows, f, static_cast<bf16*>(out));
  return ifd::launched();
}

}  // extern "C"
