// Decode attention over paged bf16 KV: one query row per sequence, GQA. Flash-decoding
// style: each (row, KV head) is split into `splits` contiguous ranges of its positions,
// one block each, so a single long sequence still spreads over the GPU; a block reads each
// K/V row once for all the query heads of its group. Its warps take positions in turn,
// loading eight positions' K and V ahead (the loads are what a decode step waits on),
// with an online softmax per query head; the warps' partials, then the splits', are
// merged by their log-sum-exp. The grid depends only on the number of rows, so a CUDA
// graph replays it for any context lengths (they are read from the device).
#include <cfloat>

#include "common.cuh"

namespace {
using ifd::bf16;

constexpr int kWarps = 4;
constexpr int kAhead = 8;  // positions a warp loads before it computes on them

template <int D>
struct Lane;  // one lane's share of a head: D / 32 values, loaded as one vector
template <>
struct Lane<128> {
  using Vec = uint2;  // 4 bf16
  static constexpr int N = 4;
};
template <>
struct Lane<64> {
  using Vec = uint32_t;  // 2 bf16
  static constexpr int N = 2;
};

template <int N, typename V>
__device__ __forceinline__ void unpack(const V& v, float* out) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const float2 f = __bfloat1622float2(p[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// Grid (splits, n_kv, rows). Row r: the token of sequence seq[r] at position pos[r],
// attending positions 0..pos[r] through its block table. q bf16 [rows, n_heads * D];
// with one split the result goes to out bf16 [rows, n_heads * D], else the split's
// (m, l, acc[D]) per query head to part f32 [rows, n_heads, splits, D + 2].
template <int D, int G>
__global__ void __launch_bounds__(kWarps * 32)
    decode_kernel(const bf16* __restrict__ kc, const bf16* __restrict__ vc,
                  const bf16* __restrict__ q, int n_kv, int block_size, float scale_log2,
                  const int32_t* __restrict__ seq, const int32_t* __restrict__ pos,
                  const int32_t* __restrict__ bt_off, const int32_t* __restrict__ bt,
                  float* __restrict__ part, bf16* __restrict__ out) {
  using L = Lane<D>;
  constexpr int N = L::N;
  const int split = blockIdx.x, kvh = blockIdx.y, r = blockIdx.z;
  const int splits = gridDim.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_heads = n_kv * G;
  const int len = pos[r] + 1;
  const int32_t* table = bt + bt_off[seq[r]];
  // This split's positions: whole blocks, as even as they divide.
  const int blocks = (len + block_size - 1) / block_size;
  const int per = (blocks + splits - 1) / splits;
  const int t0 = min(len, split * per * block_size), t1 = min(len, (split + 1) * per * block_size);

  float qv[G][N];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const bf16* qh = q + (static_cast<size_t>(r) * n_heads + kvh * G + g) * D + lane * N;
    unpack<N>(*reinterpret_cast<const typename L::Vec*>(qh), qv[g]);
#pragma unroll
    for (int i = 0; i < N; ++i) qv[g][i] *= scale_log2;  // scores in log2 units
  }
  float m[G], l[G], acc[G][N];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -FLT_MAX;
    l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i) acc[g][i] = 0.f;
  }
  const size_t head_stride = static_cast<size_t>(block_size) * D;
  for (int base = t0 + warp * kAhead; base < t1; base += kWarps * kAhead) {
    typename L::Vec kv_k[kAhead], kv_v[kAhead];
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
      const int t = base + j;
      if (t < t1) {
        const size_t off = (static_cast<size_t>(table[t / block_size]) * n_kv + kvh) * head_stride +
                           static_cast<size_t>(t % block_size) * D + lane * N;
        kv_k[j] = *reinterpret_cast<const typename L::Vec*>(kc + off);
        kv_v[j] = *reinterpret_cast<const typename L::Vec*>(vc + off);
      }
    }
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
      if (base + j >= t1) continue;  // predicated: the loop stays unrolled, kv_* in registers
      float kf[N], vf[N];
      unpack<N>(kv_k[j], kf);
      unpack<N>(kv_v[j], vf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < N; ++i) s = fmaf(qv[g][i], kf[i], s);
        s = ifd::warp_sum(s);
        const float mn = fmaxf(m[g], s);
        const float corr = exp2f(m[g] - mn), p = exp2f(s - mn);
        l[g] = l[g] * corr + p;
#pragma unroll
        for (int i = 0; i < N; ++i) acc[g][i] = fmaf(p, vf[i], acc[g][i] * corr);
        m[g] = mn;
      }
    }
  }
  // Merge the warps: (m, l) then acc through shared memory.
  __shared__ float sm[kWarps][G], sl[kWarps][G];
  __shared__ float sacc[kWarps][G][D];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (lane == 0) {
      sm[warp][g] = m[g];
      sl[warp][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < N; ++i) sacc[warp][g][lane * N + i] = acc[g][i];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * D; e += kWarps * 32) {
    const int g = e / D, d = e % D;
    float mx = -FLT_MAX;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm[w][g]);
    float lt = 0.f, at = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float c = sm[w][g] == -FLT_MAX ? 0.f : exp2f(sm[w][g] - mx);
      lt += sl[w][g] * c;
      at += sacc[w][g][d] * c;
    }
    const size_t head = static_cast<size_t>(r) * n_heads + kvh * G + g;
    if (splits == 1) {
      out[head * D + d] = __float2bfloat16(lt > 0.f ? at / lt : 0.f);
    } else {
      float* p = part + (head * splits + split) * (D + 2);
      p[2 + d] = at;
      if (d == 0) {
        p[0] = mx;
        p[1] = lt;
      }
    }
  }
}

constexpr int kMaxSplits = 32;

// Grid (rows * n_heads), D threads: out = Σ_s acc_s·2^(m_s - M) / Σ_s l_s·2^(m_s - M).
// The splits' weights are computed once, in parallel, then every thread sums its column.
template <int D>
__global__ void merge_kernel(const float* __restrict__ part, int splits, bf16* __restrict__ out) {
  __shared__ float w[kMaxSplits];
  __shared__ float total;
  const size_t head = blockIdx.x;
  const int d = threadIdx.x;
  const float* p = part + head * splits * (D + 2);
  if (d < 32) {
    const float m = d < splits ? p[d * (D + 2)] : -FLT_MAX;
    float mx = ifd::warp_max(m);
    const float c = m == -FLT_MAX ? 0.f : exp2f(m - mx);
    if (d < splits) w[d] = c;
    const float l = ifd::warp_sum(d < splits ? p[d * (D + 2) + 1] * c : 0.f);
    if (d == 0) total = l;
  }
  __syncthreads();
  float at = 0.f;
  for (int s = 0; s < splits; ++s) at += p[s * (D + 2) + 2 + d] * w[s];
  out[head * D + d] = __float2bfloat16(total > 0.f ? at / total : 0.f);
}

template <int D, int G>
int launch(const IfdPaged& kv, const void* q, int rows, float scale, const int32_t* seq,
           const int32_t* pos, const int32_t* bt_off, const int32_t* bt, int splits,
           float* part, void* out, cudaStream_t s) {
  const dim3 grid(splits, kv.n_kv_heads, rows);
  decode_kernel<D, G><<<grid, kWarps * 32, 0, s>>>(
      static_cast<const bf16*>(kv.k), static_cast<const bf16*>(kv.v),
      static_cast<const bf16*>(q), kv.n_kv_heads, kv.block_size, scale * 1.4426950408889634f,
      seq, pos, bt_off, bt, part, static_cast<bf16*>(out));
  if (splits > 1)
    merge_kernel<D><<<rows * kv.n_kv_heads * G, D, 0, s>>>(part, splits,
                                                           static_cast<bf16*>(out));
  return ifd::launched();
}

template <int D>
int by_group(int g, const IfdPaged& kv, const void* q, int rows, float scale,
             const int32_t* seq, const int32_t* pos, const int32_t* bt_off, const int32_t* bt,
             int splits, float* part, void* out, cudaStream_t s) {
  switch (g) {
    case 1: return launch<D, 1>(kv, q, rows, scale, seq, pos, bt_off, bt, splits, part, out, s);
    case 2: return launch<D, 2>(kv, q, rows, scale, seq, pos, bt_off, bt, splits, part, out, s);
    case 4: return launch<D, 4>(kv, q, rows, scale, seq, pos, bt_off, bt, splits, part, out, s);
    case 8: return launch<D, 8>(kv, q, rows, scale, seq, pos, bt_off, bt, splits, part, out, s);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}
}  // namespace

extern "C" {

int ifd_decode_supported(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128) &&
         (group == 1 || group == 2 || group == 4 || group == 8);
}

int ifd_decode_attention(IfdPaged kv, const void* q, int rows, int n_heads, float scale,
                         const int32_t* seq, const int32_t* pos, const int32_t* bt_off,
                         const int32_t* bt, int splits, float* part, void* out, void* stream) {
  if (rows == 0) return 0;
  if (!kv.kv_bf16 || splits < 1 || splits > kMaxSplits || n_heads % kv.n_kv_heads != 0 ||
      (splits > 1 && !part) ||
      !ifd_decode_supported(kv.head_dim, n_heads / kv.n_kv_heads))
    return static_cast<int>(cudaErrorInvalidValue);
  const int g = n_heads / kv.n_kv_heads;
  const cudaStream_t s = ifd::as_stream(stream);
  return kv.head_dim == 128
             ? by_group<128>(g, kv, q, rows, scale, seq, pos, bt_off, bt, splits, part, out, s)
             : by_group<64>(g, kv, q, rows, scale, seq, pos, bt_off, bt, splits, part, out, s);
}

}  // extern "C"
