// Paged KV append and causal GQA attention over block tables: the first, simple
// kernels of the CUDA backend (one block of warps per (token, head), an online softmax
// per warp, merged at the end). FlashInfer's paged kernels replace these where they
// measure faster (see docs/gpu-notes.md).
#include <cfloat>

#include "common.cuh"
#include "kv8.cuh"

namespace {
using ifd::bf16;

// 8-bit rows: one warp per (token, kv head, K or V) row, so a row's largest magnitude is
// one warp max. Row r of the pass: token r / (2 n_kv), head (r / 2) % n_kv, K if r is
// even. Values per lane: head_dim <= 256, so at most 8.
template <int KV>
__global__ void kv_append8_kernel(IfdPaged kv, const float* __restrict__ k,
                                  const float* __restrict__ v, const int32_t* __restrict__ slot,
                                  int n) {
  ifd::pdl_begin();
  const int lane = threadIdx.x & 31;
  const size_t r = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int n_kv = kv.n_kv_heads, hd = kv.head_dim;
  if (r >= static_cast<size_t>(n) * n_kv * 2) return;  // warp-uniform
  const size_t t = r / (2 * n_kv);
  const int h = static_cast<int>((r / 2) % n_kv);
  const bool is_k = r % 2 == 0;
  if (slot[t] < 0) return;  // a padding row of a bucketed pass: nothing to store
  const float* x = (is_k ? k : v) + (t * n_kv + h) * hd;
  const float* c = is_k && kv.k_offset ? kv.k_offset + static_cast<size_t>(h) * hd : nullptr;
  float d[8];
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int e = lane + 32 * i;
    d[i] = 0.f;
    if (e < hd) {
      d[i] = c ? __fsub_rn(x[e], c[e]) : x[e];
      amax = fmaxf(amax, fabsf(d[i]));
    }
  }
  amax = ifd::warp_max(amax);
  const float scale = ifd::row_scale<KV>(amax);
  const size_t s = static_cast<size_t>(slot[t]);
  const size_t row = (s / kv.block_size * n_kv + h) * kv.block_size + s % kv.block_size;
  uint8_t* codes = static_cast<uint8_t*>(is_k ? kv.k : kv.v) + row * hd;
  if (lane == 0) (is_k ? kv.k_scale : kv.v_scale)[row] = scale;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int e = lane + 32 * i;
    if (e < hd) codes[e] = ifd::quantize<KV>(d[i], scale);
  }
}

// Pages src[0..n) of an 8-bit layer, dequantized to bf16 pages 0..n of kd / vd (same
// layout). One thread per 4 values (head_dim is a multiple of 4 wherever this runs).
template <int KV>
__global__ void dequant_pages_kernel(IfdPaged kv, const int32_t* __restrict__ src, int n,
                                     bf16* __restrict__ kd, bf16* __restrict__ vd) {
  ifd::pdl_begin();
  const int hd = kv.head_dim;
  const size_t page_rows = static_cast<size_t>(kv.n_kv_heads) * kv.block_size;
  const size_t quads = static_cast<size_t>(n) * page_rows * hd / 4;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < 2 * quads;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const bool is_v = i >= quads;
    const size_t e = (is_v ? i - quads : i) * 4;  // value index in the scratch planes
    const size_t row = e / hd;                   // scratch row: page * page_rows + r
    const size_t page = row / page_rows;
    const size_t from = static_cast<size_t>(src[page]) * page_rows + row % page_rows;
    const uint32_t c = *reinterpret_cast<const uint32_t*>(
        static_cast<const uint8_t*>(is_v ? kv.v : kv.k) + from * hd + e % hd);
    const float sc = (is_v ? kv.v_scale : kv.k_scale)[from];
    __nv_bfloat162 o[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float a = ifd::Code8<KV>::decode(static_cast<uint8_t>(c >> (16 * j)));
      const float b = ifd::Code8<KV>::decode(static_cast<uint8_t>(c >> (16 * j + 8)));
      o[j] = __floats2bfloat162_rn(a * sc, b * sc);
    }
    *reinterpret_cast<uint2*>((is_v ? vd : kd) + e) = *reinterpret_cast<const uint2*>(o);
  }
}

// One value of a stored K or V row: value e of row `row` (its (block, head, slot) index).
template <typename T>
struct Rows {
  const T* p;
  static Rows make(const void* p, const float*) { return Rows{static_cast<const T*>(p)}; }
  __device__ __forceinline__ float at(size_t row, int hd, int e) const {
    return ifd::load(p + row * hd + e);
  }
};
template <int KV>
struct Rows8 {
  const uint8_t* p;
  const float* scale;
  static Rows8 make(const void* p, const float* s) {
    return Rows8{static_cast<const uint8_t*>(p), s};
  }
  __device__ __forceinline__ float at(size_t row, int hd, int e) const {
    return ifd::Code8<KV>::decode(p[row * hd + e]) * scale[row];
  }
};

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
template <typename R, int VPL>
__global__ void __launch_bounds__(WARPS * 32)
    attention_kernel(const R kc, const R vc,
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
    const size_t row = (block * n_kv + kvh) * block_size + j % block_size;
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
      const int e = lane * VPL + i;
      if (e < head_dim) dot += qv[i] * kc.at(row, head_dim, e);
    }
    const float s = ifd::warp_sum(dot);
    const float m_new = fmaxf(m, s);
    const float corr = __expf(m - m_new), w = __expf(s - m_new);
    l = l * corr + w;
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
      const int e = lane * VPL + i;
      const float vv = e < head_dim ? vc.at(row, head_dim, e) : 0.f;
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

template <typename R, int VPL>
int launch_attention(const IfdPaged& kv, const float* q, int n, int n_heads, float scale,
                     const int32_t* seq, const int32_t* pos, const int32_t* bt_off,
                     const int32_t* bt, bf16* out, cudaStream_t s) {
  dim3 grid(n_heads, n);
  const R kr = R::make(kv.k, kv.k_scale), vr = R::make(kv.v, kv.v_scale);
  ifd::launch(attention_kernel<R, VPL>, grid, WARPS * 32, 0, s, kr, vr, q, n_heads,
              kv.n_kv_heads, kv.block_size, kv.head_dim, scale, seq, pos, bt_off, bt, out);
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
  if (kv.dtype == IFD_KV_Q8 || kv.dtype == IFD_KV_FP8) {
    if (kv.head_dim > 256 || !kv.k_scale || !kv.v_scale)
      return static_cast<int>(cudaErrorInvalidValue);
    const size_t rows = static_cast<size_t>(n) * kv.n_kv_heads * 2;
    const unsigned g = static_cast<unsigned>((rows + 7) / 8);  // 8 warps a block
    if (kv.dtype == IFD_KV_Q8)
      ifd::launch(kv_append8_kernel<IFD_KV_Q8>, g, 256, 0, s, kv, k, v, slot, n);
    else
      ifd::launch(kv_append8_kernel<IFD_KV_FP8>, g, 256, 0, s, kv, k, v, slot, n);
    return ifd::launched();
  }
  if (kv.dtype == IFD_KV_BF16)
    ifd::launch(kv_append_kernel<bf16>, grid, 256, 0, s, static_cast<bf16*>(kv.k),
                static_cast<bf16*>(kv.v), k, v, slot, n, kv.n_kv_heads, kv.block_size, kv.head_dim);
  else
    ifd::launch(kv_append_kernel<float>, grid, 256, 0, s, static_cast<float*>(kv.k),
                static_cast<float*>(kv.v), k, v, slot, n, kv.n_kv_heads, kv.block_size,
                kv.head_dim);
  return ifd::launched();
}

int ifd_kv_dequant_pages(IfdPaged kv, const int32_t* src, int n, void* k_out, void* v_out,
                         void* stream) {
  if (n == 0) return 0;
  if ((kv.dtype != IFD_KV_Q8 && kv.dtype != IFD_KV_FP8) || kv.head_dim % 4 != 0)
    return static_cast<int>(cudaErrorInvalidValue);
  const size_t quads = static_cast<size_t>(n) * kv.n_kv_heads * kv.block_size * kv.head_dim / 2;
  const size_t b = (quads + 255) / 256;
  const unsigned grid = static_cast<unsigned>(b < 1u << 16 ? b : 1u << 16);
  cudaStream_t s = ifd::as_stream(stream);
  bf16* kd = static_cast<bf16*>(k_out);
  bf16* vd = static_cast<bf16*>(v_out);
  if (kv.dtype == IFD_KV_Q8)
    ifd::launch(dequant_pages_kernel<IFD_KV_Q8>, grid, 256, 0, s, kv, src, n, kd, vd);
  else
    ifd::launch(dequant_pages_kernel<IFD_KV_FP8>, grid, 256, 0, s, kv, src, n, kd, vd);
  return ifd::launched();
}

int ifd_attention(IfdPaged kv, const float* q, int n, int n_heads, float scale,
                  const int32_t* seq, const int32_t* pos, const int32_t* bt_off,
                  const int32_t* bt, void* out, void* stream) {
  if (n == 0) return 0;
  cudaStream_t s = ifd::as_stream(stream);
  bf16* o = static_cast<bf16*>(out);
  switch (kv.dtype) {
    case IFD_KV_BF16:
      return dispatch_attention<Rows<bf16>>(kv, q, n, n_heads, scale, seq, pos, bt_off, bt, o, s);
    case IFD_KV_Q8:
      return dispatch_attention<Rows8<IFD_KV_Q8>>(kv, q, n, n_heads, scale, seq, pos, bt_off, bt,
                                                  o, s);
    case IFD_KV_FP8:
      return dispatch_attention<Rows8<IFD_KV_FP8>>(kv, q, n, n_heads, scale, seq, pos, bt_off,
                                                   bt, o, s);
    default:
      return dispatch_attention<Rows<float>>(kv, q, n, n_heads, scale, seq, pos, bt_off, bt, o, s);
  }
}

}  // extern "C"
