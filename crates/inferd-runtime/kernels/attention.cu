// Paged KV append and causal GQA attention over block tables: the first, simple
// kernels of the CUDA backend (one block of warps per (token, head), an online softmax
// per warp, merged at the end). FlashInfer's paged kernels replace these where they
// measure faster (see docs/gpu-notes.md).
#include <cfloat>

#include "common.cuh"

namespace {
using ifd::bf16;

template <typename T>
__global__ void kv_append_kernel(T* __restrict__ kc, T* __restrict__ vc,
                                 const float* __restrict__ k, const float* __restrict__ v,
                                 const int32_t* __restrict__ slot, int n, int n_kv,
                                 int block_size, int head_dim) {
  ifd::pdl_begin();
  const int row = n_kv * head_dim;
  const size_t total = static_cast<size_t>(n) * row;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t t = i / row;
    const int hd = static_cast<int>(i % row);
    const int h = hd / head_dim, e = hd % head_dim;
    if (slot[t] < 0) continue;  // a padding row of a bucketed pass: nothing to store
    const size_t s = static_cast<size_t>(slot[t]);
    const size_t block = s / block_size, off = s % block_size;
    const size_t dst = ((block * n_kv + h) * block_size + off) * head_dim + e;
    ifd::store(kc + dst, k[i]);
    ifd::store(vc + dst, v[i]);
  }
}

constexpr int WARPS = 8;

// VPL: values of a head each lane holds (head_dim <= 32 * VPL).
template <typename T, int VPL>
__global__ void __launch_bounds__(WARPS * 32)
    attention_kernel(const T* __restrict__ kc, const T* __restrict__ vc,
                     const float* __restrict__ q, int n_heads, int n_kv, int block_size,
                     int head_dim, float scale, const int32_t* __restrict__ seq,
                     const int32_t* __restrict__ pos, const int32_t* __restrict__ bt_off,
                     const int32_t* __restrict__ bt, bf16* __restrict__ out) {
  ifd::pdl_begin();
  const int h = blockIdx.x, t = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = h / (n_heads / n_kv);
  const int p = pos[t];
  const int32_t* table = bt + bt_off[seq[t]];
  const size_t q_row = static_cast<size_t>(n_heads) * head_dim;

  float qv[VPL], acc[VPL];
#pragma unroll
  for (int i = 0; i < VPL; ++i) {
    const int e = lane * VPL + i;
    qv[i] = e < head_dim ? q[t * q_row + static_cast<size_t>(h) * head_dim + e] * scale : 0.f;
    acc[i] = 0.f;
  }
  float m = -FLT_MAX, l = 0.f;
  for (int j = warp; j <= p; j += WARPS) {
    const size_t block = static_cast<size_t>(table[j / block_size]);
    const size_t base = ((block * n_kv + kvh) * block_size + j % block_size) * head_dim;
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
      const int e = lane * VPL + i;
      if (e < head_dim) dot += qv[i] * ifd::load(kc + base + e);
    }
    const float s = ifd::warp_sum(dot);
    const float m_new = fmaxf(m, s);
    const float corr = __expf(m - m_new), w = __expf(s - m_new);
    l = l * corr + w;
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
      const int e = lane * VPL + i;
      const float vv = e < head_dim ? ifd::load(vc + base + e) : 0.f;
      acc[i] = acc[i] * corr + w * vv;
    }
    m = m_new;
  }
  // Merge the warps' partial softmaxes.
  __shared__ float sm[WARPS], sl[WARPS];
  __shared__ float sacc[WARPS][32 * VPL];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < VPL; ++i) sacc[warp][lane * VPL + i] = acc[i];
  __syncthreads();
  float mx = -FLT_MAX;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, sm[w]);
  float denom = 0.f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) denom += sl[w] > 0.f ? sl[w] * __expf(sm[w] - mx) : 0.f;
  for (int e = threadIdx.x; e < head_dim; e += blockDim.x) {
    float num = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w)
      if (sl[w] > 0.f) num += sacc[w][e] * __expf(sm[w] - mx);
    out[t * q_row + static_cast<size_t>(h) * head_dim + e] = __float2bfloat16(num / denom);
  }
}

template <typename T, int VPL>
int launch_attention(const IfdPaged& kv, const float* q, int n, int n_heads, float scale,
                     const int32_t* seq, const int32_t* pos, const int32_t* bt_off,
                     const int32_t* bt, bf16* out, cudaStream_t s) {
  dim3 grid(n_heads, n);
  ifd::launch(attention_kernel<T, VPL>, grid, WARPS * 32, 0, s, static_cast<const T*>(kv.k),
              static_cast<const T*>(kv.v), q, n_heads, kv.n_kv_heads, kv.block_size, kv.head_dim,
              scale, seq, pos, bt_off, bt, out);
  return ifd::launched();
}

template <typename T>
int dispatch_attention(const IfdPaged& kv, const float* q, int n, int n_heads, float scale,
                       const int32_t* seq, const int32_t* pos, const int32_t* bt_off,
                       const int32_t* bt, bf16* out, cudaStream_t s) {
  if (kv.head_dim <= 32)
    return launch_attention<T, 1>(kv, q, n, n_heads, scale, seq, pos, bt_off, bt, out, s);
  if (kv.head_dim <= 64)
    return launch_attention<T, 2>(kv, q, n, n_heads, scale, seq, pos, bt_off, bt, out, s);
  if (kv.head_dim <= 128)
    return launch_attention<T, 4>(kv, q, n, n_heads, scale, seq, pos, bt_off, bt, out, s);
  if (kv.head_dim <= 256)
    return launch_attention<T, 8>(kv, q, n, n_heads, scale, seq, pos, bt_off, bt, out, s);
  return static_cast<int>(cudaErrorInvalidValue);
}
}  // namespace

extern "C" {

int ifd_kv_append(IfdPaged kv, const float* k, const float* v, const int32_t* slot, int n,
                  void* stream) {
  const size_t total = static_cast<size_t>(n) * kv.n_kv_heads * kv.head_dim;
  if (total == 0) return 0;
  const size_t b = (total + 255) / 256;
  const unsigned grid = static_cast<unsigned>(b < 1u << 20 ? b : 1u << 20);
  cudaStream_t s = ifd::as_stream(stream);
  if (kv.kv_bf16)
    ifd::launch(kv_append_kernel<bf16>, grid, 256, 0, s, static_cast<bf16*>(kv.k),
                static_cast<bf16*>(kv.v), k, v, slot, n, kv.n_kv_heads, kv.block_size, kv.head_dim);
  else
    ifd::launch(kv_append_kernel<float>, grid, 256, 0, s, static_cast<float*>(kv.k),
                static_cast<float*>(kv.v), k, v, slot, n, kv.n_kv_heads, kv.block_size,
                kv.head_dim);
  return ifd::launched();
}

int ifd_attention(IfdPaged kv, const float* q, int n, int n_heads, float scale,
                  const int32_t* seq, const int32_t* pos, const int32_t* bt_off,
                  const int32_t* bt, void* out, void* stream) {
  if (n == 0) return 0;
  cudaStream_t s = ifd::as_stream(stream);
  bf16* o = static_cast<bf16*>(out);
  return kv.kv_bf16 ? dispatch_attention<bf16>(kv, q, n, n_heads, scale, seq, pos, bt_off, bt, o, s)
                    : dispatch_attention<float>(kv, q, n, n_heads, scale, seq, pos, bt_off, bt, o, s);
}

}  // extern "C"
