// Fusions of the small steps between matrix products, which decode passes otherwise pay
// for in kernel launches: full attention's inputs from the fused Q|K|V projection (split,
// per-head RMSNorm, rotary positions and the new K/V rows' store into the paged pool in
// one pass) and SwiGLU from the fused gate|up projection. Each computes what the separate
// kernels compute, in the same order, to the same bits.
#include <type_traits>

#include "common.cuh"
#include "kv8.cuh"

namespace {
using ifd::bf16;

constexpr int kWarps = 8;       // heads per block, one per warp
constexpr int kMaxHeadDim = 256;
constexpr int kEarlyRows = 128;  // qkv_prep's passes of at most this many rows: EARLY

// The angle index of value i of a head rotated over its first 2 * half dims (-1: i is not
// rotated), and value i of the head held in `sh` rotated with that angle's cos / sin
// (ci, si); values past the first 2 * half dims unchanged.
__device__ __forceinline__ int angle_of(int i, int half, int neox) {
  if (i >= 2 * half) return -1;
  return neox ? (i < half ? i : i - half) : i >> 1;
}
__device__ __forceinline__ float rotated_by(const float* sh, int i, int half, int neox, float ci,
                                            float si) {
  const int j = angle_of(i, half, neox);
  if (j < 0) return sh[i];
  const int a = neox ? j : 2 * j, b = neox ? j + half : 2 * j + 1;
  const float x0 = sh[a], x1 = sh[b];
  return i == a ? x0 * ci - x1 * si : x0 * si + x1 * ci;
}
// The same by the angles of its position (c, s: the position's cos / sin table rows).
__device__ __forceinline__ float rotated(const float* sh, int i, int half, int neox,
                                         const float* c, const float* s) {
  const int j = angle_of(i, half, neox);
  return j < 0 ? sh[i] : rotated_by(sh, i, half, neox, c[j], s[j]);
}

// Where qkv_prep stores the pass's new K/V rows in the paged pool: token r at physical
// slot slot[r] (negative: a padding row, stored nowhere), as ifd_kv_append stores them.
// kv.k null: not stored.
struct KvStore {
  IfdPaged kv;
  const int32_t* slot;
};

// Codes and scale of one 8-bit row from the lane's values d[j] of elements e[j] (< 0:
// none), the row's largest magnitude amax.
template <int KV, int N>
__device__ __forceinline__ void put8(uint8_t* codes, float* scale, float amax, const float (&d)[N],
                                     const int (&e)[N]) {
  const float sc = ifd::row_scale<KV>(amax);
  if ((threadIdx.x & 31) == 0) *scale = sc;
#pragma unroll
  for (int j = 0; j < N; ++j)
    if (e[j] >= 0) codes[e[j]] = ifd::quantize<KV>(d[j], sc);
}

// Stores KV head h (a K head when is_k) of a token into the pool at its slot (st.slot[r]):
// the lane's final values x[j] of elements e[j] (< 0: none). Every lane of the warp calls it: an 8-bit row takes
// its scale from the head's largest magnitude (after K's offset, when the pool has one),
// with ifd_kv_append's arithmetic, so both write the same bytes.
template <int N>
__device__ __forceinline__ void store_head(const KvStore& st, int slot, int h, bool is_k,
                                           const float (&x)[N], const int (&e)[N]) {
  const IfdPaged& kv = st.kv;
  if (slot < 0) return;  // warp-uniform
  const size_t s = static_cast<size_t>(slot), hd = static_cast<size_t>(kv.head_dim);
  const size_t row =
      (s / kv.block_size * kv.n_kv_heads + h) * kv.block_size + s % kv.block_size;
  void* plane = is_k ? kv.k : kv.v;
  if (kv.dtype == IFD_KV_BF16 || kv.dtype == IFD_KV_F32) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (e[j] < 0) continue;
      if (kv.dtype == IFD_KV_BF16)
        ifd::store(static_cast<bf16*>(plane) + row * hd + e[j], x[j]);
      else
        ifd::store(static_cast<float*>(plane) + row * hd + e[j], x[j]);
    }
    return;
  }
  const float* c = is_k && kv.k_offset ? kv.k_offset + h * hd : nullptr;
  float d[N];
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    d[j] = 0.f;
    if (e[j] >= 0) {
      d[j] = c ? __fsub_rn(x[j], c[e[j]]) : x[j];
      amax = fmaxf(amax, fabsf(d[j]));
    }
  }
  amax = ifd::warp_max(amax);
  uint8_t* codes = static_cast<uint8_t*>(plane) + row * hd;
  float* scale = (is_k ? kv.k_scale : kv.v_scale) + row;
  if (kv.dtype == IFD_KV_Q8)
    put8<IFD_KV_Q8>(codes, scale, amax, d, e);
  else
    put8<IFD_KV_FP8>(codes, scale, amax, d, e);
}

// One warp per (row, head) of qkv [rows, (hq + 2 hkv) * d] (In: f32 or bf16). A q or k head is
// RMS-normed by its weight (when given), then rotated over its first 2 * half dims at
// the row's position; v heads are copied. k and v heads also go to the pool (`st`).
//   -> q [rows, hq * d] (f32 or bf16), k, v f32 [rows, hkv * d] (each null: not written)
// V4: loads and stores of 4 values (head_dim % 4 == 0), lane L owning the groups of 4 values
// L, L + 32, ... of its head; else one value a lane at a time.
template <typename In, typename Q, bool V4, bool EARLY>
__global__ void __launch_bounds__(kWarps * 32)
    qkv_prep_kernel(const In* __restrict__ qkv, int rows, int hq, int hkv, int d,
                    const float* __restrict__ qn, const float* __restrict__ kn, float eps,
                    int half, int neox, const int32_t* __restrict__ pos,
                    const float* __restrict__ cos_tab, const float* __restrict__ sin_tab,
                    Q* __restrict__ q, float* __restrict__ k, float* __restrict__ v,
                    KvStore st) {
  ifd::kprobe<3>(ifd::kEntry);
  // The pass's metadata, the norms' weights and the rotary tables are no kernel's output:
  // with EARLY (the 16-byte path of a decode-sized pass) a lane reads its share of them
  // before the wait for the kernel before. (It holds them in registers, which in a prompt
  // pass would cost a block a multiprocessor: about 58 registers a thread against 46.)
  static_assert(V4 || !EARLY);
  if constexpr (EARLY) {
    ifd::pdl_trigger();
  } else {
    ifd::pdl_begin();
    ifd::kprobe<3>(ifd::kWaited);
  }
  __shared__ float4 head[kWarps][kMaxHeadDim / 4];  // a warp's head, 16-byte aligned
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int heads = hq + 2 * hkv;
  const size_t g = static_cast<size_t>(blockIdx.x) * kWarps + warp;  // row * heads + head
  if (g >= static_cast<size_t>(rows) * heads) {
    if constexpr (EARLY) ifd::pdl_wait();
    return;
  }
  const size_t r = g / heads;
  const int h = static_cast<int>(g % heads);
  const In* src = qkv + g * d;
  float* sh = reinterpret_cast<float*>(head[warp]);
  const float* w = h < hq ? qn : kn;
  const float* c = cos_tab + static_cast<size_t>(pos[r]) * half;
  const float* s = sin_tab + static_cast<size_t>(pos[r]) * half;
  const bool is_v = h >= hq + hkv;
  const bool to_pool = st.kv.k != nullptr && h >= hq;
  const int kvh = is_v ? h - hq - hkv : h - hq;  // for k and v heads
  if constexpr (V4) {
    constexpr int kPer = kMaxHeadDim / 128;  // groups a lane at most
    const int groups = d >> 2;
    // EARLY, before the wait: the slot, and for a q or k head the lane's norm weights and
    // its values' cos / sin.
    const float4* w4 = reinterpret_cast<const float4*>(w);
    int slot = -1;
    float4 nw[kPer];
    float cs[4 * kPer], sn[4 * kPer];
    if constexpr (EARLY) {
      slot = to_pool ? st.slot[r] : -1;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int i = lane + 32 * j;
        nw[j] = !is_v && w && i < groups ? w4[i] : float4{1.f, 1.f, 1.f, 1.f};
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const int a = is_v || i >= groups ? -1 : angle_of(4 * i + t, half, neox);
          cs[4 * j + t] = a >= 0 ? c[a] : 1.f;
          sn[4 * j + t] = a >= 0 ? s[a] : 0.f;
        }
      }
      ifd::pdl_wait();
      ifd::kprobe<3>(ifd::kWaited);
    }
    float4 x[kPer];
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = lane + 32 * j;
      x[j] = i < groups ? ifd::load4(src + 4 * i) : float4{0.f, 0.f, 0.f, 0.f};
      ss += x[j].x * x[j].x + x[j].y * x[j].y + x[j].z * x[j].z + x[j].w * x[j].w;
    }
    // The head's final values a lane holds, and their elements (-1: none), for the pool.
    float fin[4 * kPer];
    int at[4 * kPer];
    if (is_v) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int i = lane + 32 * j;
        const float t4[4] = {x[j].x, x[j].y, x[j].z, x[j].w};
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          fin[4 * j + t] = t4[t];
          at[4 * j + t] = i < groups ? 4 * i + t : -1;
        }
        if (v && i < groups) reinterpret_cast<float4*>(v + (r * hkv + kvh) * d)[i] = x[j];
      }
    } else {
      if (w) {
        const float inv = rsqrtf(ifd::warp_sum(ss) / d + eps);
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          const int i = lane + 32 * j;
          if (i < groups) {
            const float4 s4 = EARLY ? nw[j] : w4[i];
            x[j] = float4{x[j].x * inv * s4.x, x[j].y * inv * s4.y, x[j].z * inv * s4.z,
                          x[j].w * inv * s4.w};
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kPer; ++j)
        if (lane + 32 * j < groups) reinterpret_cast<float4*>(sh)[lane + 32 * j] = x[j];
      __syncwarp();
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int i4 = lane + 32 * j;
        float val[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const int e = 4 * i4 + t;
          val[t] = i4 >= groups ? 0.f
                   : EARLY      ? rotated_by(sh, e, half, neox, cs[4 * j + t], sn[4 * j + t])
                                : rotated(sh, e, half, neox, c, s);
          fin[4 * j + t] = val[t];
          at[4 * j + t] = i4 < groups ? 4 * i4 + t : -1;
        }
        if (i4 >= groups) continue;
        if (h < hq) {
          Q* dst = q + (r * hq + h) * d + 4 * i4;
          if constexpr (sizeof(Q) == 2) {
            ifd::store4(dst, val[0], val[1], val[2], val[3]);
          } else {
            *reinterpret_cast<float4*>(dst) = float4{val[0], val[1], val[2], val[3]};
          }
        } else if (k) {
          *reinterpret_cast<float4*>(k + (r * hkv + kvh) * d + 4 * i4) =
              float4{val[0], val[1], val[2], val[3]};
        }
      }
    }
    if (to_pool) store_head(st, EARLY ? slot : st.slot[r], kvh, !is_v, fin, at);
  } else {
    constexpr int kPer = kMaxHeadDim / 32;  // values a lane at most
    float fin[kPer];
    int at[kPer];
    if (is_v) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int i = lane + 32 * j;
        fin[j] = i < d ? ifd::load(src + i) : 0.f;
        at[j] = i < d ? i : -1;
        if (v && i < d) v[(r * hkv + kvh) * d + i] = fin[j];
      }
    } else {
      if (w) {
        float ss = 0.f;
        for (int i = lane; i < d; i += 32) ss += ifd::load(src + i) * ifd::load(src + i);
        const float inv = rsqrtf(ifd::warp_sum(ss) / d + eps);
        for (int i = lane; i < d; i += 32) sh[i] = ifd::load(src + i) * inv * w[i];
      } else {
        for (int i = lane; i < d; i += 32) sh[i] = ifd::load(src + i);
      }
      __syncwarp();
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int i = lane + 32 * j;
        fin[j] = i < d ? rotated(sh, i, half, neox, c, s) : 0.f;
        at[j] = i < d ? i : -1;
        if (i >= d) continue;
        if (h < hq)
          ifd::store(q + (r * hq + h) * d + i, fin[j]);
        else if (k)
          k[(r * hkv + kvh) * d + i] = fin[j];
      }
    }
    if (to_pool) store_head(st, st.slot[r], kvh, !is_v, fin, at);
  }
  ifd::kprobe<3>(ifd::kDone);
}

// out[r, c] = silu(gu[r, c]) * gu[r, f + c]   gu [rows, 2f] (In: f32 or bf16) -> out bf16
// [rows, f]. Grid (column groups, row groups): a thread takes V consecutive columns (V = 4
// with loads of 4 values when f % 4 == 0, else 1) of rows blockIdx.y, + gridDim.y, ...
using ifd::silu_mul;

template <typename In, int V>
__global__ void swiglu_kernel(const In* __restrict__ gu, int rows, int f,
                              bf16* __restrict__ out) {
  ifd::kprobe<3>(ifd::kEntry);
  ifd::pdl_begin();
  ifd::kprobe<3>(ifd::kWaited);
  const int c = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (c >= f) return;
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const In* g = gu + static_cast<size_t>(r) * 2 * f + c;
    bf16* o = out + static_cast<size_t>(r) * f + c;
    if constexpr (V == 4) {
      const float4 a = ifd::load4(g);
      const float4 u = ifd::load4(g + f);
      ifd::store4(o, silu_mul(a.x, u.x), silu_mul(a.y, u.y), silu_mul(a.z, u.z),
                  silu_mul(a.w, u.w));
    } else {
      o[0] = __float2bfloat16(silu_mul(ifd::load(g), ifd::load(g + f)));
    }
  }
  ifd::kprobe<3>(ifd::kDone);
}
}  // namespace

IFD_KERNEL_PROBE_SETTER(ifd_kernel_probe_fused)

extern "C" {

int ifd_qkv_prep(const void* qkv, int qkv_bf16, int rows, int hq, int hkv, int head_dim,
                 const float* q_norm, const float* k_norm, float eps, int half, int neox,
                 const int32_t* pos, const float* cos_tab, const float* sin_tab, void* q,
                 int q_bf16, float* k, float* v, const IfdPaged* kv, const int32_t* slot,
                 void* stream) {
  const size_t warps = static_cast<size_t>(rows) * (hq + 2 * hkv);
  if (warps == 0) return 0;
  if (head_dim > kMaxHeadDim || 2 * half > head_dim) return static_cast<int>(cudaErrorInvalidValue);
  KvStore st{};
  if (kv) {
    const bool eight = kv->dtype == IFD_KV_Q8 || kv->dtype == IFD_KV_FP8;
    if (!slot || !kv->k || !kv->v || kv->n_kv_heads != hkv || kv->head_dim != head_dim ||
        kv->block_size < 1 || (eight && (!kv->k_scale || !kv->v_scale)) ||
        (!eight && kv->dtype != IFD_KV_BF16 && kv->dtype != IFD_KV_F32))
      return static_cast<int>(cudaErrorInvalidValue);
    st = KvStore{*kv, slot};
  }
  const unsigned blocks = static_cast<unsigned>((warps + kWarps - 1) / kWarps);
  const cudaStream_t s = ifd::as_stream(stream);
  const auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  const bool v4 = head_dim % 4 == 0 && (addr(qkv) & (qkv_bf16 ? 7 : 15)) == 0 &&
                  ((addr(q_norm) | addr(k_norm) | addr(k) | addr(v)) & 15) == 0 &&
                  (addr(q) & (q_bf16 ? 7 : 15)) == 0;
  // Decode-sized passes read what no kernel writes before their wait (see EARLY).
  const bool early = v4 && rows <= kEarlyRows;
  const auto run = [&](auto kernel, auto* in, auto* qo) {
    ifd::launch(kernel, blocks, kWarps * 32, 0, s, in, rows, hq, hkv, head_dim, q_norm, k_norm,
                eps, half, neox, pos, cos_tab, sin_tab, qo, k, v, st);
  };
  // The input's and q's types (4) by the path (2).
  const auto go = [&](auto* in) {
    using In = std::remove_const_t<std::remove_pointer_t<decltype(in)>>;
    bf16* qb = static_cast<bf16*>(q);
    float* qf = static_cast<float*>(q);
    if (q_bf16)
      early ? run(qkv_prep_kernel<In, bf16, true, true>, in, qb)
      : v4  ? run(qkv_prep_kernel<In, bf16, true, false>, in, qb)
            : run(qkv_prep_kernel<In, bf16, false, false>, in, qb);
    else
      early ? run(qkv_prep_kernel<In, float, true, true>, in, qf)
      : v4  ? run(qkv_prep_kernel<In, float, true, false>, in, qf)
            : run(qkv_prep_kernel<In, float, false, false>, in, qf);
  };
  if (qkv_bf16)
    go(static_cast<const bf16*>(qkv));
  else
    go(static_cast<const float*>(qkv));
  return ifd::launched();
}

int ifd_swiglu(const void* gate_up, int in_bf16, int rows, int f, void* out, void* stream) {
  if (rows == 0 || f == 0) return 0;
  constexpr unsigned kThreads = 256;
  const int v = f % 4 == 0 ? 4 : 1;
  const dim3 grid(ifd::blocks_for(static_cast<size_t>(f / v), kThreads),
                  static_cast<unsigned>(rows < 65535 ? rows : 65535));
  const cudaStream_t s = ifd::as_stream(stream);
  bf16* o = static_cast<bf16*>(out);
  const auto go = [&](auto* in) {
    using In = std::remove_const_t<std::remove_pointer_t<decltype(in)>>;
    if (v == 4)
      ifd::launch(swiglu_kernel<In, 4>, grid, kThreads, 0, s, in, rows, f, o);
    else
      ifd::launch(swiglu_kernel<In, 1>, grid, kThreads, 0, s, in, rows, f, o);
  };
  if (in_bf16)
    go(static_cast<const bf16*>(gate_up));
  else
    go(static_cast<const float*>(gate_up));
  return ifd::launched();
}

}  // extern "C"
