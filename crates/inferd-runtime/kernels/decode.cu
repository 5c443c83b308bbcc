// Decode attention over paged bf16 or 8-bit KV: one query row per sequence, GQA. Flash-decoding
// style: each (row, KV head) is split into `splits` contiguous ranges of its positions,
// one block each, so a single long sequence still spreads over the GPU; a block reads each
// K/V row once for all the G query heads of its group.
//
// A warp works in rounds of 32 / G positions, so that a round has exactly 32 (position,
// head) scores: each lane computes its partial dot products of all 32, and one transposed
// butterfly (31 shuffles) leaves lane L with the whole score of position L / G, head L % G.
// The softmax state (running max m and sum l of a head) lives on the lanes of that head;
// a round updates it with one max and one sum over those lanes, and then every lane adds
// the round's 32 weighted V rows to its slice of the G output heads. So there is no
// dependent chain per position (the cost of a per-position online softmax), and the K/V
// loads of a whole iteration (R rounds) are issued before any arithmetic on them. (A
// register pipeline, V loading during the scores and the next K during the sums, measured
// slower on the H200: 17.3 against 14.3 ms an 8B step at 32 rows; docs/gpu-notes.md.)
//
// Several rows may be one sequence's (a chunk of a few tokens, e.g. a speculative check:
// row i of a chunk starting at position p attends 0..p + i), so a row's positions written by
// this pass start at its chunk's start position, `fresh` below (the row's own position for
// a one-token chunk).
//
// With one row (the PRE build) a block first copies the K/V rows of its range, up to
// `pre_cap` positions, into shared memory, before it waits for the kernel before it
// (ifd::pdl_trigger / pdl_wait): those rows were written by earlier passes, so their read
// overlaps the Q/K/V projection of this layer instead of following it. Only the positions
// from `fresh` on, which the KV append right before writes, are read again after the wait.
// The tensor-core build likewise issues each warp's first two tiles before the wait where
// they hold only positions before `fresh`.
//
// The warps' partials are merged by their log-sum-exp in shared memory, then the splits'
// by the last block of a (row, KV head) to finish (a counter per pair, reset by that
// block, so a CUDA graph replays it). The grid depends only on the number of rows, so a
// graph replays it for any context lengths (they are read from the device).
#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>

#include "common.cuh"
#include "kv8.cuh"

namespace {
using ifd::bf16;

constexpr int kWarps = 4;
constexpr int kMaxSplits = 64;  // a multiple of 32
constexpr unsigned kFull = 0xffffffffu;

template <int D>
struct Lane;  // one lane's share of a head: D / 32 values, loaded as one vector
template <>
struct Lane<256> {
  using Vec = uint4;  // 8 bf16
  static constexpr int N = 8;
};
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

// A lane's share of an 8-bit head: D / 32 codes.
template <int D>
struct Lane8;
template <>
struct Lane8<256> {
  using Vec = uint2;
};
template <>
struct Lane8<128> {
  using Vec = uint32_t;
};
template <>
struct Lane8<64> {
  using Vec = uint16_t;
};

// The element type, a lane's vector and its unpacking for KV dtype KV (IFD_KV_*).
template <int D, int KV>
struct Kv {
  using Elem = uint8_t;
  using Vec = typename Lane8<D>::Vec;
  static constexpr bool kScaled = true;
  __device__ __forceinline__ static void unpack(const Vec& v, float* out) {
    const uint8_t* c = reinterpret_cast<const uint8_t*>(&v);
#pragma unroll
    for (int i = 0; i < D / 32; i += 2) ifd::Code8<KV>::decode2(c + i, out + i);
  }
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

// One halving step of the transposed butterfly: of the C values v[0..C), a lane keeps
// the upper half if bit O of its index is set, else the lower half, and adds the partner
// lane's copy of the half it keeps.
template <int C, int O>
__device__ __forceinline__ void halve(float* v, int lane) {
  const bool upper = lane & O;
#pragma unroll
  for (int i = 0; i < C / 2; ++i) {
    const float send = upper ? v[i] : v[i + C / 2];
    const float keep = upper ? v[i + C / 2] : v[i];
    v[i] = keep + __shfl_xor_sync(kFull, send, O);
  }
}

// v[0..32) per lane -> the sum over lanes of v[lane], returned on lane `lane`.
__device__ __forceinline__ float transpose_sum(float* v, int lane) {
  halve<32, 16>(v, lane);
  halve<16, 8>(v, lane);
  halve<8, 4>(v, lane);
  halve<4, 2>(v, lane);
  halve<2, 1>(v, lane);
  return v[0];
}

// Max / sum over the lanes of one head (lanes L with equal L % G).
template <int G>
__device__ __forceinline__ float head_max(float v) {
#pragma unroll
  for (int o = G; o < 32; o <<= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
template <int G>
__device__ __forceinline__ float head_sum(float v) {
#pragma unroll
  for (int o = G; o < 32; o <<= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// A block's share of the grid (splits, n_kv, rows): row r (the token of sequence seq[r] at
// position pos[r]), KV head kvh, and of the row's positions 0..pos[r] the split's range
// [t0, t1): whole blocks of its table, as even as they divide.
struct Range {
  // fresh: the first position this pass writes of the row's sequence (its chunk's start).
  int split, splits, kvh, r, len, fresh, t0, t1;
  const int32_t* table;
  int n_kv, block_size;
  // Position t's row in a [num_blocks, n_kv, block_size] plane (its first value at
  // row · D in a K or V plane, its scale at row in a scale plane).
  __device__ __forceinline__ size_t row(int t) const {
    return (static_cast<size_t>(table[t / block_size]) * n_kv + kvh) * block_size + t % block_size;
  }
};
// chunks: the pass's chunks (first row, tokens, start position, state slot) [n_chunks, 4],
// or null where every row is its own chunk's only token (then fresh = the row's position).
// span: rows r .. r + span - 1 of one chunk attended by this block (the grouped build), the
// range that of the last (its positions cover the others').
__device__ __forceinline__ Range range_of(const int32_t* __restrict__ seq,
                                          const int32_t* __restrict__ pos,
                                          const int32_t* __restrict__ chunks,
                                          const int32_t* __restrict__ bt_off,
                                          const int32_t* __restrict__ bt, int n_kv,
                                          int block_size, int span = 1) {
  Range g;
  g.n_kv = n_kv;
  g.block_size = block_size;
  g.split = blockIdx.x;
  g.splits = gridDim.x;
  g.kvh = blockIdx.y;
  g.r = blockIdx.z;
  g.len = pos[g.r + span - 1] + 1;
  const int si = seq[g.r];
  g.table = bt + bt_off[si];
  g.fresh = chunks ? min(chunks[4 * si + 2], g.len - 1) : g.len - 1;
  const int blocks = (g.len + block_size - 1) / block_size;
  const int per = (blocks + g.splits - 1) / g.splits;
  g.t0 = min(g.len, g.split * per * block_size);
  g.t1 = min(g.len, (g.split + 1) * per * block_size);
  return g;
}

// Profiling only (`cuda_check timeline`): when set, the first thread of each block of the
// decode kernels writes the global timer (ns) at its stages into
// probe[block · kProbeStages + stage], block = (r · n_kv + kvh) · splits + split. Never
// written by a kernel, so it is read before the programmatic wait.
__device__ unsigned long long* g_decode_probe;
constexpr int kProbeStages = 11;
// Stages: 0 entry, 1 the wait for the kernel before returned, 2 the first tile's loads
// issued (its range and block table read), 3 the first tile arrived, 4 the tile loop
// done (warp 0), 5 every warp done (the block's merge begins), 6 the split's partial
// counted; the (row, KV head)'s last block only: 7 its count known, 8 the partials in
// shared memory (staged; else as 7), 9 the maxima and sums merged, 10 the outputs written
// (the cluster form: 10 at its end).
__device__ __forceinline__ void stamp(unsigned long long* probe, int stage) {
  if (probe && threadIdx.x == 0) {
    const unsigned long long t = ifd::global_ns();
    const size_t block = (static_cast<size_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x +
                         blockIdx.x;
    probe[block * kProbeStages + stage] = t;
  }
}

// A block's W warps' softmax partials of their S slots (a slot: a query head of one row):
// running max m, sum l, acc[D].
template <int D, int S, int W = kWarps>
struct Partials {
  float m[W][S], l[W][S];
  float acc[W][S][D];
};

// Value d of slot g over a block's warps, merged by log-sum-exp: its max, sum and
// weighted value, the warps summed in their order.
struct Merged {
  float m, l, acc;
};
template <int D, int S, int W>
__device__ __forceinline__ Merged merge_warps(const Partials<D, S, W>& sp, int g, int d) {
  Merged r{-FLT_MAX, 0.f, 0.f};
#pragma unroll
  for (int w = 0; w < W; ++w) r.m = fmaxf(r.m, sp.m[w][g]);
#pragma unroll
  for (int w = 0; w < W; ++w) {
    const float c = sp.m[w][g] == -FLT_MAX ? 0.f : exp2f(sp.m[w][g] - r.m);
    r.l += sp.l[w][g] * c;
    r.acc += sp.acc[w][g][d] * c;
  }
  return r;
}

// The end of a block of either decode kernel, its warps' partials in `sp`: merges them by
// log-sum-exp, then writes the (row, KV head)'s G output heads (one split), or its split's
// partial to `part` and, in the last block of the (row, KV head) to finish, merges the
// splits' (a counter per pair in `done`, reset by that block, so a graph replays it). The
// grouped build's block holds `slots` = G · rows slots of rows r, r + 1, ..: slot e is row
// r + e / G's head kvh·G + e % G (one row: slot g is head kvh·G + g).
// `stage` (stage_floats of shared memory the block no longer needs, or null): where the
// last block copies every partial it reads, when they fit.
template <int D, int G, int S = G, int W = kWarps>
__device__ __forceinline__ void finish(Partials<D, S, W>& sp, int r, int kvh, int n_kv, int split,
                                       int splits, float* __restrict__ part,
                                       int32_t* __restrict__ done, bf16* __restrict__ out,
                                       int slots = G, float* stage = nullptr,
                                       size_t stage_floats = 0) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_heads = n_kv * G;
  unsigned long long* const probe = g_decode_probe;
  // Slot e's head, counted over all rows' heads.
  const auto head_of = [&](int e) -> size_t {
    if constexpr (S == G) {
      return static_cast<size_t>(r) * n_heads + kvh * G + e;
    } else {
      return static_cast<size_t>(r + e / G) * n_heads + kvh * G + e % G;
    }
  };
  __syncthreads();
  stamp(probe, 5);
  for (int e = threadIdx.x; e < slots * D; e += W * 32) {
    const int g = e / D, d = e % D;
    const auto [mx, lt, at] = merge_warps(sp, g, d);
    const size_t head = head_of(g);
    if (splits == 1) {
      out[head * D + d] = __float2bfloat16(lt > 0.f ? at / lt : 0.f);
    } else {
      float* pp = part + (head * splits + split) * (D + 2);
      pp[2 + d] = at;
      if (d == 0) {
        pp[0] = mx;
        pp[1] = lt;
      }
    }
  }
  if (splits == 1) {
    ifd::kprobe<4>(ifd::kDone);
    return;
  }

  // The last block of this (row, KV head) merges the splits:
  // out = Σ_s acc_s·2^(m_s - M) / Σ_s l_s·2^(m_s - M).
  // Thread 0's count publishes the block's partials, which every thread wrote before the
  // barrier (a release, cumulative over it), and in the last block acquires the others'
  // (its threads read them after the barrier after it). No thread fence: the last block's
  // took 2-4 µs of the merge (session 33's timeline).
  __shared__ bool last;
  __syncthreads();
  int32_t* counter = done + static_cast<size_t>(r) * n_kv + kvh;
  if (threadIdx.x == 0) last = ifd::atomic_add_acq_rel(counter, 1) == splits - 1;
  __syncthreads();
  stamp(probe, 6);
  if (!last) {
    ifd::kprobe<4>(ifd::kDone);
    return;
  }
  stamp(probe, 7);
  __shared__ float w[S][kMaxSplits];
  __shared__ float total[S];
  // Staged (where the partials fit `stage`): one round of asynchronous copies brings every
  // partial this block reads into shared memory, a row's G heads' splits being contiguous
  // in `part`; the merge then reads them there (the same sums in the same order; 0.6%
  // faster a step at 8 rows, equal at 1-2: session 33). Otherwise each value is read
  // from L2.
  const int rows = slots / G;
  const size_t per_row = static_cast<size_t>(G) * splits * (D + 2);  // floats, even
  const bool staged = stage != nullptr && rows * per_row <= stage_floats;
  if (staged) {
    for (int j = 0; j < rows; ++j) {
      const float* src = part + head_of(j * G) * splits * (D + 2);
      float* dst = stage + j * per_row;
#pragma unroll 1
      for (size_t i = 2 * threadIdx.x; i < per_row; i += 2 * W * 32) ifd::cp_async8(dst + i, src + i);
    }
    ifd::cp_async_wait_all();
    __syncthreads();
  }
  stamp(probe, 8);
  // Value k (0: max, 1: sum, 2 + d: value d) of partial (slot e, split s).
  const auto partial = [&](int e, int s, int k) -> float {
    return staged ? stage[(static_cast<size_t>(e) * splits + s) * (D + 2) + k]
                  : __ldcg(part + (head_of(e) * splits + s) * (D + 2) + k);
  };
  for (int g = warp; g < slots; g += W) {
    // Lane L takes splits L and L + 32.
    float ms[kMaxSplits / 32], mx = -FLT_MAX;
#pragma unroll
    for (int i = 0; i < kMaxSplits / 32; ++i) {
      const int s = lane + 32 * i;
      ms[i] = s < splits ? partial(g, s, 0) : -FLT_MAX;
      mx = fmaxf(mx, ms[i]);
    }
    mx = ifd::warp_max(mx);
    float lt = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxSplits / 32; ++i) {
      const int s = lane + 32 * i;
      const float c = ms[i] == -FLT_MAX ? 0.f : exp2f(ms[i] - mx);
      w[g][s] = c;
      lt += s < splits ? partial(g, s, 1) * c : 0.f;
    }
    lt = ifd::warp_sum(lt);
    if (lane == 0) total[g] = lt;
  }
  __syncthreads();
  stamp(probe, 9);
  for (int e = threadIdx.x; e < slots * D; e += W * 32) {
    const int g = e / D, d = e % D;
    float at = 0.f;
    if (staged) {
      const float* ph = stage + static_cast<size_t>(g) * splits * (D + 2) + 2 + d;
#pragma unroll 4
      for (int s = 0; s < splits; ++s) at = fmaf(ph[s * (D + 2)], w[g][s], at);
    } else {
      const float* ph = part + head_of(g) * splits * (D + 2) + 2 + d;
      // Every split's value of a group of 32 loaded before any is added.
#pragma unroll
      for (int s0 = 0; s0 < kMaxSplits; s0 += 32) {
        if (s0 >= splits) break;
        float v[32];
#pragma unroll
        for (int s = 0; s < 32; ++s) v[s] = s0 + s < splits ? __ldcg(ph + (s0 + s) * (D + 2)) : 0.f;
#pragma unroll
        for (int s = 0; s < 32; ++s) at = fmaf(v[s], w[g][s0 + s], at);
      }
    }
    out[head_of(g) * D + d] = __float2bfloat16(total[g] > 0.f ? at / total[g] : 0.f);
  }
  if (threadIdx.x == 0) *counter = 0;  // ready for the next launch
  stamp(probe, 10);
  ifd::kprobe<4>(ifd::kDone);
}

// The tensor-core build's cluster form (W = 4 or 8 warps a block): the splits of a (row,
// KV head) are the blocks of one thread-block cluster, at most kMaxCluster of them.
// A block merges its warps' partials (in `sp`) as `finish` does, into its own shared
// memory; after the cluster's barrier, block c merges outputs c·E .. c·E + E - 1 of the
// (row, KV head)'s G·D (E = G·D / splits, rounded up) from every block's partial, read
// over distributed shared memory: no partial goes through L2, and there is no counter
// and no last block to wait for. A second barrier keeps each block's shared memory until
// every block has read it. The splits are summed in their order, as `finish` does.
constexpr int kMaxCluster = 16;
// A block's merged partial, which the other blocks of its cluster read: the max and sum of
// each of the G heads, and their weighted values [G, D].
template <int D, int G>
struct BlockPartial {
  float m[G], l[G];
  float acc[G * D];
};
template <int D, int G, int W>
__device__ __forceinline__ void finish_cluster(Partials<D, G, W>& sp, int r,
                                               int kvh, int n_kv, int splits,
                                               bf16* __restrict__ out) {
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  unsigned long long* const probe = g_decode_probe;
  __shared__ BlockPartial<D, G> mine;
  __syncthreads();
  stamp(probe, 5);
  for (int e = threadIdx.x; e < G * D; e += W * 32) {
    const int g = e / D, d = e % D;
    const auto [mx, lt, at] = merge_warps(sp, g, d);
    mine.acc[e] = at;
    if (d == 0) {
      mine.m[g] = mx;
      mine.l[g] = lt;
    }
  }
  cluster.sync();  // every split's partial written (release / acquire)
  stamp(probe, 6);
  const int per = (G * D + splits - 1) / splits;
  const int c = static_cast<int>(cluster.block_rank());
  for (int i = threadIdx.x; i < per && c * per + i < G * D; i += W * 32) {
    const int e = c * per + i, g = e / D, d = e % D;
    // Every split's three values loaded before any is used.
    float ms[kMaxCluster], ls[kMaxCluster], as[kMaxCluster];
#pragma unroll
    for (int s = 0; s < kMaxCluster; ++s) {
      const bool ok = s < splits;
      const BlockPartial<D, G>* other = cluster.map_shared_rank(&mine, ok ? s : 0);
      ms[s] = ok ? other->m[g] : -FLT_MAX;
      ls[s] = ok ? other->l[g] : 0.f;
      as[s] = ok ? other->acc[e] : 0.f;
    }
    float mx = -FLT_MAX;
#pragma unroll
    for (int s = 0; s < kMaxCluster; ++s) mx = fmaxf(mx, ms[s]);
    float lt = 0.f, at = 0.f;
#pragma unroll
    for (int s = 0; s < kMaxCluster; ++s) {
      const float wgt = ms[s] == -FLT_MAX ? 0.f : exp2f(ms[s] - mx);
      lt = fmaf(ls[s], wgt, lt);
      at = fmaf(as[s], wgt, at);
    }
    const size_t head = static_cast<size_t>(r) * n_kv * G + kvh * G + g;
    out[head * D + d] = __float2bfloat16(lt > 0.f ? at / lt : 0.f);
  }
  cluster.sync();  // no block leaves while another may read its shared memory
  stamp(probe, 10);
  ifd::kprobe<4>(ifd::kDone);
}

// Grid (splits, n_kv, rows). Row r: the token of chunk seq[r] at position pos[r],
// attending positions 0..pos[r] through its block table (see range_of for `chunks`). q bf16 [rows, n_heads * D] ->
// out bf16 [rows, n_heads * D]. With several splits each block leaves its (m, l, acc[D])
// per query head in part f32 [rows, n_heads, splits, D + 2] and the last block of a
// (row, KV head) to finish, counted in done [rows * n_kv] (zero between launches),
// merges them.
template <int D>
struct Kv<D, IFD_KV_BF16> {
  using Elem = bf16;
  using Vec = typename Lane<D>::Vec;
  static constexpr bool kScaled = false;
  __device__ __forceinline__ static void unpack(const Vec& v, float* out) {
    ::unpack<Lane<D>::N>(v, out);
  }
};

// 8-bit KV (KV = IFD_KV_Q8 / IFD_KV_FP8): a position's K and V rows each have a scale (ks,
// vs [num_blocks, n_kv, block_size]); a score is the codes' dot product times the K
// scale, and a weight times the V scale multiplies the V codes (the sums l take the
// weights alone).
// LEAN: half the positions in flight per iteration, at most 96 registers a thread (5 blocks
// of 4 warps per SM instead of 3-4). With several rows the kernel is bound by the latency
// it can hide, which the warps resident decide more than the loads each keeps in flight:
// LEAN is 10% faster at 64 rows and 8 rows, 3% slower at 1 row, where a row's splits leave
// most of the GPU idle anyway (docs/gpu-notes.md, session 6). So: LEAN from 2 rows.
template <int D, int G, int KV, bool LEAN>
__global__ void __launch_bounds__(kWarps * 32, LEAN ? 5 : 1)
    decode_kernel(const typename Kv<D, KV>::Elem* __restrict__ kc,
                  const typename Kv<D, KV>::Elem* __restrict__ vc, const float* __restrict__ ks,
                  const float* __restrict__ vs,
                  const bf16* __restrict__ q, int n_kv, int block_size, float scale_log2,
                  const int32_t* __restrict__ seq, const int32_t* __restrict__ pos,
                  const int32_t* __restrict__ chunks, const int32_t* __restrict__ bt_off,
                  const int32_t* __restrict__ bt, float* __restrict__ part,
                  int32_t* __restrict__ done, int pre_cap,
                  bf16* __restrict__ out) {
  ifd::kprobe<4>(ifd::kEntry);
  ifd::pdl_trigger();
  using K = Kv<D, KV>;
  using E = typename K::Elem;
  using Vec = typename K::Vec;
  constexpr int N = Lane<D>::N;
  constexpr int P = 32 / G;  // positions a round
  // Rounds an iteration: about 16 positions' K and V in flight per lane (8 for D = 256),
  // half that when LEAN. (Twice as many for 8-bit codes, as many bytes in as many
  // registers, measured slower: 168 registers, 3 blocks an SM.)
  constexpr int kFlight = (D == 256 ? 8 : 16) / (LEAN ? 2 : 1);
  constexpr int R = kFlight / P > 0 ? kFlight / P : 1;
  constexpr int PI = P * R;  // positions an iteration
  const Range rg = range_of(seq, pos, chunks, bt_off, bt, n_kv, block_size);
  const int split = rg.split, splits = rg.splits, kvh = rg.kvh, r = rg.r, len = rg.len;
  const int t0 = rg.t0, t1 = rg.t1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_heads = n_kv * G;

  // Positions [t0, pre_end) come from shared memory: K rows [pre_cap][D], V rows, then
  // (8-bit) their K and V scales [pre_cap] each.
  extern __shared__ float smem[];
  E* const pk = reinterpret_cast<E*>(smem);
  E* const pv = pk + static_cast<size_t>(pre_cap) * D;
  float* const pks = reinterpret_cast<float*>(pv + static_cast<size_t>(pre_cap) * D);
  float* const pvs = pks + pre_cap;
  // (The lean build never prefetches: it runs with several rows.)
  const int pre_end = LEAN ? t0 : min(t1, t0 + pre_cap);
  constexpr int kChunks = D * static_cast<int>(sizeof(E)) / 16;  // 16-byte pieces a row
  for (int c = threadIdx.x; c < (pre_end - t0) * kChunks; c += kWarps * 32) {
    const int p = c / kChunks, piece = c % kChunks;
    const size_t off = rg.row(t0 + p) * D;
    ifd::cp_async16(reinterpret_cast<char*>(pk + static_cast<size_t>(p) * D) + 16 * piece,
                    reinterpret_cast<const char*>(kc + off) + 16 * piece);
    ifd::cp_async16(reinterpret_cast<char*>(pv + static_cast<size_t>(p) * D) + 16 * piece,
                    reinterpret_cast<const char*>(vc + off) + 16 * piece);
  }
  if constexpr (K::kScaled) {
    for (int p = threadIdx.x; p < pre_end - t0; p += kWarps * 32) {
      ifd::cp_async4(pks + p, ks + rg.row(t0 + p));
      ifd::cp_async4(pvs + p, vs + rg.row(t0 + p));
    }
  }
  ifd::pdl_wait();
  ifd::kprobe<4>(ifd::kWaited);
  if (!LEAN && pre_end > t0) {
    ifd::cp_async_wait_all();
    __syncthreads();
    // The positions this pass wrote (the append before this kernel), a warp each.
    for (int t = max(rg.fresh, t0) + warp; t < pre_end; t += kWarps) {
      const size_t off = rg.row(t) * D;
      for (int i = lane; i < D; i += 32) {
        pk[static_cast<size_t>(t - t0) * D + i] = kc[off + i];
        pv[static_cast<size_t>(t - t0) * D + i] = vc[off + i];
      }
      if constexpr (K::kScaled) {
        if (lane == 0) {
          pks[t - t0] = ks[rg.row(t)];
          pvs[t - t0] = vs[rg.row(t)];
        }
      }
    }
    __syncthreads();
  }

  float qv[G][N];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const bf16* qh = q + (static_cast<size_t>(r) * n_heads + kvh * G + g) * D + lane * N;
    unpack<N>(*reinterpret_cast<const typename Lane<D>::Vec*>(qh), qv[g]);  // q is bf16
#pragma unroll
    for (int i = 0; i < N; ++i) qv[g][i] *= scale_log2;  // scores in log2 units
  }
  // Lane L keeps the softmax state of head L % G; every lane its slice of all G heads.
  float m = -FLT_MAX, l = 0.f;
  float acc[G][N];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < N; ++i) acc[g][i] = 0.f;

  for (int base = t0 + warp * PI; base < t1; base += kWarps * PI) {
    Vec kr[PI], vr[PI];
#pragma unroll
    for (int j = 0; j < PI; ++j) {
      const int t = base + j;
      if (t < pre_end) {
        const size_t off = static_cast<size_t>(t - t0) * D + lane * N;
        kr[j] = *reinterpret_cast<const Vec*>(pk + off);
        vr[j] = *reinterpret_cast<const Vec*>(pv + off);
      } else if (t < t1) {
        const size_t off = rg.row(t) * D + lane * N;
        kr[j] = *reinterpret_cast<const Vec*>(kc + off);
        vr[j] = *reinterpret_cast<const Vec*>(vc + off);
      } else {
        kr[j] = Vec{};  // past the end: weight 0, so no stale register may be NaN
        vr[j] = Vec{};
      }
    }
    // 8-bit: the scales of the position whose score a lane ends up with, per round.
    float ksr[R], vsr[R];
#pragma unroll
    for (int round = 0; round < R; ++round) {
      ksr[round] = vsr[round] = 0.f;
      if constexpr (K::kScaled) {
        const int t = base + round * P + lane / G;
        if (t < pre_end) {
          ksr[round] = pks[t - t0];
          vsr[round] = pvs[t - t0];
        } else if (t < t1) {
          const size_t row = rg.row(t);
          ksr[round] = ks[row];
          vsr[round] = vs[row];
        }
      }
    }
#pragma unroll
    for (int round = 0; round < R; ++round) {
      const int rb = base + round * P;  // the round's first position
      if (rb >= t1) break;              // warp-uniform
      float s[32];                      // partial scores, index j * G + g
#pragma unroll
      for (int j = 0; j < P; ++j) {
        float kf[N];
        K::unpack(kr[round * P + j], kf);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          float d = 0.f;
#pragma unroll
          for (int i = 0; i < N; ++i) d = fmaf(qv[g][i], kf[i], d);
          s[j * G + g] = d;
        }
      }
      // Lane L: the score of position rb + L / G for head L % G (past the end: none).
      const bool valid = rb + lane / G < t1;
      float sc = transpose_sum(s, lane);  // every lane takes part in the shuffles
      if constexpr (K::kScaled) sc *= ksr[round];
      if (!valid) sc = -FLT_MAX;
      const float mn = fmaxf(m, head_max<G>(sc));  // finite: the round's first position is valid
      const float p = valid ? exp2f(sc - mn) : 0.f;
      const float corr = exp2f(m - mn);
      l = l * corr + head_sum<G>(p);
      m = mn;
      const float pv = K::kScaled ? p * vsr[round] : p;  // the weight of the V codes
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float c = __shfl_sync(kFull, corr, g);
#pragma unroll
        for (int i = 0; i < N; ++i) acc[g][i] *= c;
      }
#pragma unroll
      for (int j = 0; j < P; ++j) {
        float vf[N];
        K::unpack(vr[round * P + j], vf);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float pj = __shfl_sync(kFull, pv, j * G + g);
#pragma unroll
          for (int i = 0; i < N; ++i) acc[g][i] = fmaf(pj, vf[i], acc[g][i]);
        }
      }
    }
  }
  // Merge the warps: (m, l) then acc through shared memory.
  __shared__ Partials<D, G> sp;
  if (lane < G) {
    sp.m[warp][lane] = m;
    sp.l[warp][lane] = l;
  }
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < N; ++i) sp.acc[warp][g][lane * N + i] = acc[g][i];
  finish<D, G>(sp, r, kvh, n_kv, split, splits, part, done, out);
}

// The tensor-core build (bf16 KV, D = 64 or 128): the same grid, splits and merge, but each
// warp streams tiles of T = 16 positions of K and V into its own double-buffered shared
// memory (cp.async, 16-byte pieces, swizzled by row so ldmatrix reads without bank
// conflicts) and computes with mma.sync m16n8k16: the scores S = Q·Kᵀ with the G query
// heads as the M rows (padded to 16 with zeros), the positions as N; then O += P·V with P
// taken from S's accumulators as the A operand, in bf16. The arithmetic is no longer what
// bounds it: a warp has a whole tile (2·T·D·2 bytes) in flight while it computes the last.
constexpr int kTile = 16;

// Shared memory a block of the tensor-core build takes: per warp 2 stages of a K and a V tile.
template <int D, int W = kWarps>
constexpr size_t mma_smem() {
  return static_cast<size_t>(W) * 2 * 2 * kTile * D * sizeof(bf16);
}

// Where piece `c` (16 bytes, 8 values) of row `p` of a [kTile, D] tile lives: pieces are
// permuted by the row's low 3 bits, so the 8 rows of one ldmatrix read 8 different banks.
template <int D>
__device__ __forceinline__ int swz(int p, int c) {
  return p * D + ((c ^ (p & 7)) << 3);
}

// RG > 1 (the grouped build): a block attends up to RG consecutive rows of one chunk (a
// speculative check's), row i's G heads in M rows i·G .. i·G + G - 1 of the 16-row MMA
// tile, so the chunk's K/V is read once for those rows; a row that is not its group's
// first leaves at once. Each M row masks positions past its own row's.
// W warps a block: 4 (3 blocks a multiprocessor), or 8 (one a multiprocessor: the wide
// form, half the splits of the plain grid, each warp keeping its positions). CL: the
// cluster form, the splits of a (row, KV head) one thread-block cluster (see
// finish_cluster); else the last block of a pair to finish merges them (see finish).
template <int D, int G, int RG = 1, int W = kWarps, bool CL = false>
__global__ void __launch_bounds__(W * 32, RG > 1 ? 2 : (W == 8 ? 1 : 3))
    decode_mma_kernel(const bf16* __restrict__ kc, const bf16* __restrict__ vc,
                      const bf16* __restrict__ q, int n_kv, int block_size, float scale_log2,
                      const int32_t* __restrict__ seq, const int32_t* __restrict__ pos,
                      const int32_t* __restrict__ chunks, const int32_t* __restrict__ bt_off,
                      const int32_t* __restrict__ bt, float* __restrict__ part,
                      int32_t* __restrict__ done, bf16* __restrict__ out) {
  static_assert(D == 64 || D == 128, "the tensor-core build takes head_dim 64 or 128");
  static_assert(G <= 8, "at most 8 query heads a KV head (the M rows 0..7)");
  static_assert(RG == 1 || G * RG == 16, "a group fills the 16 M rows");
  static_assert((W == kWarps || (RG == 1 && W == 8)) && (!CL || RG == 1),
                "the grouped build has blocks of 4 warps; the wide and cluster forms one row");
  unsigned long long* const probe = g_decode_probe;
  stamp(probe, 0);
  ifd::kprobe<4>(ifd::kEntry);
  ifd::pdl_trigger();
  constexpr int KS = D / 16;     // k-steps of Q·Kᵀ
  constexpr int NT = D / 8;      // n-tiles of P·V
  constexpr int CH = D / 8;      // 16-byte pieces a row
  // Rows of this block's group (1 but in the grouped build).
  int span = 1;
  if constexpr (RG > 1) {
    const int z = blockIdx.z, si = seq[z];
    const int first = chunks ? chunks[4 * si] : z;
    const int end = chunks ? min(first + chunks[4 * si + 1], static_cast<int>(gridDim.z)) : z + 1;
    if (z > first && (z - first) % RG != 0) return;  // its group's first row attends it
    span = z >= first ? min(RG, end - z) : 1;
  }
  const Range rg = range_of(seq, pos, chunks, bt_off, bt, n_kv, block_size, span);
  const int split = rg.split, splits = rg.splits, kvh = rg.kvh, r = rg.r;
  const int t0 = rg.t0, t1 = rg.t1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_heads = n_kv * G;

  extern __shared__ float smem[];
  bf16* const tiles = reinterpret_cast<bf16*>(smem) + static_cast<size_t>(warp) * 4 * kTile * D;
  // Tile of positions tb.. into stage st: K at tiles[2 st], V at tiles[2 st + 1]; rows past
  // t1 are zeros.
  const auto issue = [&](int tb, int st) {
    bf16* kt = tiles + (2 * st) * kTile * D;
    bf16* vt = kt + kTile * D;
#pragma unroll
    for (int c = lane; c < kTile * CH; c += 32) {
      const int p = c / CH, piece = c % CH, t = tb + p;
      const bool ok = t < t1;
      const size_t off = ok ? rg.row(t) * D + piece * 8 : 0;
      ifd::cp_async16_zfill(kt + swz<D>(p, piece), kc + off, ok);
      ifd::cp_async16_zfill(vt + swz<D>(p, piece), vc + off, ok);
    }
    ifd::cp_async_commit();
  };

  // A warp's first two tiles (both stages) are read before the wait for the kernel before
  // (the KV append), where they hold only positions before `fresh`, the first that kernel
  // writes of the row's sequence: earlier passes wrote them, and the pass's metadata, block
  // tables and block copies are complete before its first kernel lets the next launch (the
  // embedding, elementwise.cu).
  constexpr int kStep = W * kTile;
  int tb = t0 + warp * kTile;
  int early = 0;  // this warp's tiles issued before the wait
  while (early < 2 && tb + early * kStep < t1 &&
         min(tb + early * kStep + kTile, t1) <= rg.fresh) {
    issue(tb + early * kStep, early);
    ++early;
  }
  ifd::pdl_wait();
  stamp(probe, 1);
  ifd::kprobe<4>(ifd::kWaited);

  // Q as the A operand: rows lane / 4 (< G: query head kvh·G + row), k-pairs 2 (lane % 4).
  // Rows 8..15 (a[1], a[3]) are zero. (Grouped: M row i is row r + i / G's head i % G, for
  // i < G · span; lane / 4 + 8 in a[1], a[3].)
  uint32_t qa[KS][4];
  // The last position M rows lane / 4 and lane / 4 + 8 attend (grouped; -1: no row).
  [[maybe_unused]] int lim_a = 0, lim_b = 0;
  if constexpr (RG == 1) {
    const int row = lane >> 2;
    const uint32_t* qh = reinterpret_cast<const uint32_t*>(
        q + (static_cast<size_t>(r) * n_heads + kvh * G + (row < G ? row : 0)) * D);
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      qa[ks][0] = row < G ? qh[ks * 8 + (lane & 3)] : 0u;
      qa[ks][2] = row < G ? qh[ks * 8 + 4 + (lane & 3)] : 0u;
      qa[ks][1] = qa[ks][3] = 0u;
    }
  } else {
    const int ma = lane >> 2, mb = ma + 8;
    const bool ok_a = ma < G * span, ok_b = mb < G * span;
    const auto q_of = [&](int m, bool ok) {
      const int i = ok ? m : 0;
      return reinterpret_cast<const uint32_t*>(
          q + (static_cast<size_t>(r + i / G) * n_heads + kvh * G + i % G) * D);
    };
    const uint32_t* qh_a = q_of(ma, ok_a);
    const uint32_t* qh_b = q_of(mb, ok_b);
    lim_a = ok_a ? pos[r + ma / G] : -1;
    lim_b = ok_b ? pos[r + mb / G] : -1;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      qa[ks][0] = ok_a ? qh_a[ks * 8 + (lane & 3)] : 0u;
      qa[ks][2] = ok_a ? qh_a[ks * 8 + 4 + (lane & 3)] : 0u;
      qa[ks][1] = ok_b ? qh_b[ks * 8 + (lane & 3)] : 0u;
      qa[ks][3] = ok_b ? qh_b[ks * 8 + 4 + (lane & 3)] : 0u;
    }
  }
  // Softmax state of row lane / 4 (every lane of a quad holds the same), and O's
  // accumulators: n-tile n holds O[row][8n + 2 (lane % 4) + {0, 1}] in [0], [1] (grouped:
  // row lane / 4 + 8's in [2], [3], its state in m_b, l_b).
  float m = -FLT_MAX, l = 0.f;
  [[maybe_unused]] float m_b = -FLT_MAX, l_b = 0.f;
  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

  if (early == 0 && tb < t1) {
    issue(tb, 0);
    early = 1;
  }
  stamp(probe, 2);
  for (int st = 0, k = 0; tb < t1; tb += kStep, st ^= 1, ++k) {
    const int next = tb + kStep;
    if (next < t1) {
      if (k + 1 >= early) issue(next, st ^ 1);  // unless issued before the wait
      ifd::cp_async_wait<1>();
    } else {
      ifd::cp_async_wait<0>();
    }
    __syncwarp();
    if (tb == t0) stamp(probe, 3);
    const bf16* kt = tiles + (2 * st) * kTile * D;
    const bf16* vt = kt + kTile * D;
    // S = Q·Kᵀ: n-tile j covers positions tb + 8j .. + 7.
    float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int ks = 0; ks < KS; ks += 2) {
        // Matrices: k-step ks (pieces 2ks, 2ks + 1), k-step ks + 1 (pieces 2ks + 2, + 3), of
        // rows (positions) 8j .. 8j + 7.
        uint32_t b[4];
        const int mi = lane >> 3, row = 8 * j + (lane & 7);
        ifd::ldmatrix_x4<false>(b, kt + swz<D>(row, 2 * ks + mi));
        ifd::mma_bf16(sc[j], qa[ks], b[0], b[1]);
        ifd::mma_bf16(sc[j], qa[ks + 1], b[2], b[3]);
      }
    }
    // O += P·V: P (rows, k = the 16 positions) from the score accumulators.
    uint32_t pa[4];
    if constexpr (RG == 1) {
      // Online softmax over the tile's 16 positions (in log2 units), rows lane / 4.
      float tile_max = -FLT_MAX;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int t = tb + 8 * j + 2 * (lane & 3) + e;
          sc[j][e] = t < t1 ? sc[j][e] * scale_log2 : -FLT_MAX;
          tile_max = fmaxf(tile_max, sc[j][e]);
        }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(kFull, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(kFull, tile_max, 2));
      const float mn = fmaxf(m, tile_max);  // finite: position tb is valid
      const float corr = exp2f(m - mn);
      float rs = 0.f;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          sc[j][e] = sc[j][e] == -FLT_MAX ? 0.f : exp2f(sc[j][e] - mn);
          rs += sc[j][e];
        }
      rs += __shfl_xor_sync(kFull, rs, 1);
      rs += __shfl_xor_sync(kFull, rs, 2);
      l = l * corr + rs;
      m = mn;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        o[n][0] *= corr;
        o[n][1] *= corr;
      }
      pa[0] = ifd::pack_bf16(sc[0][0], sc[0][1]);
      pa[2] = ifd::pack_bf16(sc[1][0], sc[1][1]);
      pa[1] = pa[3] = 0u;
    } else {
      // Rows lane / 4 ([0], [1]) and lane / 4 + 8 ([2], [3]), each its own positions.
      float max_a = -FLT_MAX, max_b = -FLT_MAX;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int t = tb + 8 * j + 2 * (lane & 3) + e;
          sc[j][e] = t < t1 && t <= lim_a ? sc[j][e] * scale_log2 : -FLT_MAX;
          sc[j][2 + e] = t < t1 && t <= lim_b ? sc[j][2 + e] * scale_log2 : -FLT_MAX;
          max_a = fmaxf(max_a, sc[j][e]);
          max_b = fmaxf(max_b, sc[j][2 + e]);
        }
      max_a = fmaxf(max_a, __shfl_xor_sync(kFull, max_a, 1));
      max_a = fmaxf(max_a, __shfl_xor_sync(kFull, max_a, 2));
      max_b = fmaxf(max_b, __shfl_xor_sync(kFull, max_b, 1));
      max_b = fmaxf(max_b, __shfl_xor_sync(kFull, max_b, 2));
      // A row may have no position yet (-FLT_MAX both: its correction 1, its weights 0).
      const float mn_a = fmaxf(m, max_a), mn_b = fmaxf(m_b, max_b);
      const float corr_a = exp2f(m - mn_a), corr_b = exp2f(m_b - mn_b);
      float rs_a = 0.f, rs_b = 0.f;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          sc[j][e] = sc[j][e] == -FLT_MAX ? 0.f : exp2f(sc[j][e] - mn_a);
          sc[j][2 + e] = sc[j][2 + e] == -FLT_MAX ? 0.f : exp2f(sc[j][2 + e] - mn_b);
          rs_a += sc[j][e];
          rs_b += sc[j][2 + e];
        }
      rs_a += __shfl_xor_sync(kFull, rs_a, 1);
      rs_a += __shfl_xor_sync(kFull, rs_a, 2);
      rs_b += __shfl_xor_sync(kFull, rs_b, 1);
      rs_b += __shfl_xor_sync(kFull, rs_b, 2);
      l = l * corr_a + rs_a;
      l_b = l_b * corr_b + rs_b;
      m = mn_a;
      m_b = mn_b;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        o[n][0] *= corr_a;
        o[n][1] *= corr_a;
        o[n][2] *= corr_b;
        o[n][3] *= corr_b;
      }
      pa[0] = ifd::pack_bf16(sc[0][0], sc[0][1]);
      pa[1] = ifd::pack_bf16(sc[0][2], sc[0][3]);
      pa[2] = ifd::pack_bf16(sc[1][0], sc[1][1]);
      pa[3] = ifd::pack_bf16(sc[1][2], sc[1][3]);
    }
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      // Matrices (transposed): positions 0..7 and 8..15 of dims 8n .., then of 8 (n + 1) ..
      uint32_t b[4];
      const int mi = lane >> 3, row = 8 * (mi & 1) + (lane & 7);
      ifd::ldmatrix_x4<true>(b, vt + swz<D>(row, n + (mi >> 1)));
      ifd::mma_bf16(o[n], pa, b[0], b[1]);
      ifd::mma_bf16(o[n + 1], pa, b[2], b[3]);
    }
    __syncwarp();  // this stage is read before the next tile's copies overwrite it
  }
  stamp(probe, 4);

  __shared__ Partials<D, G * RG, W> sp;
  const int row = lane >> 2;
  if (row < G * span) {
    if ((lane & 3) == 0) {
      sp.m[warp][row] = m;
      sp.l[warp][row] = l;
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      sp.acc[warp][row][8 * n + 2 * (lane & 3)] = o[n][0];
      sp.acc[warp][row][8 * n + 2 * (lane & 3) + 1] = o[n][1];
    }
  }
  if constexpr (RG > 1) {
    if (row + 8 < G * span) {
      if ((lane & 3) == 0) {
        sp.m[warp][row + 8] = m_b;
        sp.l[warp][row + 8] = l_b;
      }
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        sp.acc[warp][row + 8][8 * n + 2 * (lane & 3)] = o[n][2];
        sp.acc[warp][row + 8][8 * n + 2 * (lane & 3) + 1] = o[n][3];
      }
    }
    finish<D, G, G * RG, W>(sp, r, kvh, n_kv, split, splits, part, done, out, G * span, smem,
                            mma_smem<D, W>() / sizeof(float));
  } else {
    if constexpr (CL) {
      finish_cluster<D, G, W>(sp, r, kvh, n_kv, splits, out);
    } else {
      finish<D, G, G, W>(sp, r, kvh, n_kv, split, splits, part, done, out, G, smem,
                         mma_smem<D, W>() / sizeof(float));
    }
  }
}

// Blocks of the one-row build resident per multiprocessor: its registers allow 3.
constexpr int kPreBlocks = 3;

// Shared memory the one-row build's prefetch takes a position: its K and V rows, and
// (8-bit) their two scales.
template <int D, int KV>
constexpr int pre_row_bytes() {
  using K = Kv<D, KV>;
  return 2 * D * static_cast<int>(sizeof(typename K::Elem)) + (K::kScaled ? 8 : 0);
}

// The one-row build's prefetch: as many positions as fit beside its static shared memory
// with kPreBlocks blocks a multiprocessor (at most 64 KiB), after raising the kernel's
// dynamic shared memory limit to it once. 0 where none fit, or on an error (then `err`).
template <int D, int G, int KV>
int pre_positions(int* err) {
  static int cap = -1;  // per instantiation; the same answer for every device of one kind
  if (cap >= 0) return cap;
  int dev = 0, per_sm = 0;
  cudaFuncAttributes a{};
  if ((*err = cudaGetDevice(&dev)) != 0 ||
      (*err = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev)) !=
          0 ||
      (*err = cudaFuncGetAttributes(&a, decode_kernel<D, G, KV, false>)) != 0)
    return 0;
  constexpr int row = pre_row_bytes<D, KV>();
  const int budget = per_sm / kPreBlocks - 1024 - static_cast<int>(a.sharedSizeBytes);
  const int n = budget < (64 << 10) ? budget / row : (64 << 10) / row;
  const int positions = n > 0 ? n / 16 * 16 : 0;
  if (positions > 0 &&
      (*err = cudaFuncSetAttribute(decode_kernel<D, G, KV, false>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, positions * row)) != 0)
    return 0;
  cap = positions;
  return cap;
}

// Raises the tensor-core build's dynamic shared memory limit (blocks of W warps, not a
// cluster), once per instantiation: the error, or 0.
template <int D, int G, int RG = 1, int W = kWarps>
int allow_mma_smem() {
  static const int err = cudaFuncSetAttribute(decode_mma_kernel<D, G, RG, W>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(mma_smem<D, W>()));
  return err;
}

// Raises the cluster form's dynamic shared memory limit and allows it clusters of more than
// 8 blocks, once per instantiation: the error, or 0.
template <int D, int G, int CW>
int allow_cluster() {
  static const int err = [] {
    const auto kernel = decode_mma_kernel<D, G, 1, CW, true>;
    int e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(mma_smem<D, CW>()));
    if (e == 0) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    return e;
  }();
  return err;
}

// The tensor-core build, where it takes the shape (bf16, D 64 or 128, G ≤ 8), in form
// `form`: 1 plain, 2 grouped (rows of one chunk in one block, RG = 16 / G of them), 3 and 4
// the cluster form in blocks of 8 and of 4 warps (the splits one cluster: 2 ≤ splits ≤
// kMaxCluster), 5 the wide form (blocks of 8 warps, merged by the last block).
template <int D, int G>
int launch_mma(const IfdPaged& kv, const void* q, int rows, float scale, const int32_t* seq,
               const int32_t* pos, const int32_t* chunks, const int32_t* bt_off,
               const int32_t* bt, int splits, float* part, int32_t* done, int form,
               void* out, cudaStream_t s) {
  if constexpr ((D == 64 || D == 128) && G <= 8) {
    constexpr int RG = 16 / G;
    const bool cluster = form == 3 || form == 4;
    if (cluster && (splits < 2 || splits > kMaxCluster))
      return static_cast<int>(cudaErrorInvalidValue);
    const int err = form == 3   ? allow_cluster<D, G, 8>()
                    : form == 4 ? allow_cluster<D, G, 4>()
                    : form == 5 ? allow_mma_smem<D, G, 1, 8>()
                    : form == 2 ? allow_mma_smem<D, G, RG>()
                                : allow_mma_smem<D, G>();
    if (err != 0) return err;
    const dim3 grid(splits, kv.n_kv_heads, rows);
    const auto args = [&](auto kernel, int warps) {
      const size_t smem = warps * mma_smem<D, 1>();
      const auto k = static_cast<const bf16*>(kv.k);
      const auto v = static_cast<const bf16*>(kv.v);
      const auto qb = static_cast<const bf16*>(q);
      const float sl = scale * 1.4426950408889634f;
      const auto o = static_cast<bf16*>(out);
      ifd::launch_cluster(kernel, grid, warps * 32, smem, s, cluster ? splits : 1, k, v, qb,
                          kv.n_kv_heads, kv.block_size, sl, seq, pos, chunks, bt_off, bt, part,
                          done, o);
    };
    if (form == 3) {
      args(decode_mma_kernel<D, G, 1, 8, true>, 8);
    } else if (form == 4) {
      args(decode_mma_kernel<D, G, 1, 4, true>, 4);
    } else if (form == 5) {
      args(decode_mma_kernel<D, G, 1, 8>, 8);
    } else if (form == 2) {
      args(decode_mma_kernel<D, G, RG>, kWarps);
    } else {
      args(decode_mma_kernel<D, G>, kWarps);
    }
    return ifd::launched();
  } else {
    return static_cast<int>(cudaErrorInvalidValue);
  }
}

// Blocks of the tensor-core build a multiprocessor holds (0 where it does not take the
// shape, or on an error), from the occupancy calculator at its launch configuration.
template <int D, int G>
int mma_blocks_per_sm() {
  if constexpr ((D == 64 || D == 128) && G <= 8) {
    int n = 0;
    if (allow_mma_smem<D, G>() != 0 ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_mma_kernel<D, G>, kWarps * 32,
                                                      mma_smem<D>()) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  } else {
    return 0;
  }
}

// Clusters of `splits` blocks of CW warps of the cluster form the device holds at once (0
// where it does not take the shape; minus the error where a query fails), from the
// occupancy calculator.
template <int D, int G, int CW>
int cluster_capacity(int splits) {
  if constexpr ((D == 64 || D == 128) && G <= 8) {
    if (splits < 2 || splits > kMaxCluster) return 0;
    if (const int err = allow_cluster<D, G, CW>()) return -err;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = splits;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(splits, 1, 1);
    cfg.blockDim = dim3(CW * 32, 1, 1);
    cfg.dynamicSmemBytes = mma_smem<D, CW>();
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int n = 0;
    const int err =
        static_cast<int>(cudaOccupancyMaxActiveClusters(&n, decode_mma_kernel<D, G, 1, CW, true>, &cfg));
    if (err != 0) {
      cudaGetLastError();
      return -err;
    }
    return n;
  } else {
    return 0;
  }
}

template <int D, int CW>
int clusters_by_group(int g, int splits) {
  switch (g) {
    case 1: return cluster_capacity<D, 1, CW>(splits);
    case 2: return cluster_capacity<D, 2, CW>(splits);
    case 4: return cluster_capacity<D, 4, CW>(splits);
    case 8: return cluster_capacity<D, 8, CW>(splits);
    default: return 0;
  }
}

template <int D>
int mma_blocks_by_group(int g) {
  switch (g) {
    case 1: return mma_blocks_per_sm<D, 1>();
    case 2: return mma_blocks_per_sm<D, 2>();
    case 4: return mma_blocks_per_sm<D, 4>();
    case 8: return mma_blocks_per_sm<D, 8>();
    default: return 0;
  }
}

template <int D, int G, int KV>
int launch_kv(const IfdPaged& kv, const void* q, int rows, float scale, const int32_t* seq,
              const int32_t* pos, const int32_t* chunks, const int32_t* bt_off,
               const int32_t* bt, int splits,
              float* part, int32_t* done, int mma, void* out, cudaStream_t s) {
  using K = Kv<D, KV>;
  using E = typename K::Elem;
  if constexpr (KV == IFD_KV_BF16)
    if (mma)
      return launch_mma<D, G>(kv, q, rows, scale, seq, pos, chunks, bt_off, bt, splits, part,
                              done, mma, out, s);
  const dim3 grid(splits, kv.n_kv_heads, rows);
  int err = 0, pre = 0;
  if (rows == 1) {
    pre = pre_positions<D, G, KV>(&err);
    if (err != 0) return err;
  }
  const size_t smem = static_cast<size_t>(pre) * pre_row_bytes<D, KV>();
  ifd::launch(rows > 1 ? decode_kernel<D, G, KV, true> : decode_kernel<D, G, KV, false>, grid,
              kWarps * 32, smem, s, static_cast<const E*>(kv.k), static_cast<const E*>(kv.v),
              static_cast<const float*>(kv.k_scale), static_cast<const float*>(kv.v_scale),
              static_cast<const bf16*>(q), kv.n_kv_heads, kv.block_size,
              scale * 1.4426950408889634f, seq, pos, chunks, bt_off, bt, part, done, pre,
              static_cast<bf16*>(out));
  return ifd::launched();
}

template <int D, int G>
int launch(const IfdPaged& kv, const void* q, int rows, float scale, const int32_t* seq,
           const int32_t* pos, const int32_t* chunks, const int32_t* bt_off,
               const int32_t* bt, int splits,
           float* part, int32_t* done, int mma, void* out, cudaStream_t s) {
  switch (kv.dtype) {
    case IFD_KV_BF16:
      return launch_kv<D, G, IFD_KV_BF16>(kv, q, rows, scale, seq, pos, chunks, bt_off, bt, splits, part,
                                          done, mma, out, s);
    case IFD_KV_Q8:
      return launch_kv<D, G, IFD_KV_Q8>(kv, q, rows, scale, seq, pos, chunks, bt_off, bt, splits, part,
                                        done, mma, out, s);
    case IFD_KV_FP8:
      return launch_kv<D, G, IFD_KV_FP8>(kv, q, rows, scale, seq, pos, chunks, bt_off, bt, splits, part,
                                         done, mma, out, s);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

template <int D>
int by_group(int g, const IfdPaged& kv, const void* q, int rows, float scale,
             const int32_t* seq, const int32_t* pos, const int32_t* chunks, const int32_t* bt_off,
             const int32_t* bt, int splits, float* part, int32_t* done, int mma, void* out, cudaStream_t s) {
  switch (g) {
    case 1:
      return launch<D, 1>(kv, q, rows, scale, seq, pos, chunks, bt_off, bt, splits, part, done, mma, out, s);
    case 2:
      return launch<D, 2>(kv, q, rows, scale, seq, pos, chunks, bt_off, bt, splits, part, done, mma, out, s);
    case 4:
      return launch<D, 4>(kv, q, rows, scale, seq, pos, chunks, bt_off, bt, splits, part, done, mma, out, s);
    case 8:
      return launch<D, 8>(kv, q, rows, scale, seq, pos, chunks, bt_off, bt, splits, part, done, mma, out, s);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}
}  // namespace

namespace {
// Profiling only (SkipOps::ATTENTION_STUB): the decode grid's place in the chain, no work.
__global__ void __launch_bounds__(256) attention_stub_kernel(uint32_t* out, size_t words) {
  ifd::pdl_begin();
  for (size_t i = blockIdx.x * 256ull + threadIdx.x; i < words; i += gridDim.x * 256ull) out[i] = 0;
}
}  // namespace

IFD_KERNEL_PROBE_SETTER(ifd_kernel_probe_decode)

extern "C" {

int ifd_decode_probe(void* buf) {
  return static_cast<int>(cudaMemcpyToSymbol(g_decode_probe, &buf, sizeof buf));
}

int ifd_attention_stub(void* out, size_t n, void* stream) {
  const size_t words = n / 2;  // bf16 pairs (rows of whole heads: n is even)
  const int blocks = static_cast<int>(std::min<size_t>(256, (words + 255) / 256));
  if (blocks == 0) return 0;
  ifd::launch(attention_stub_kernel, blocks, 256, 0, ifd::as_stream(stream),
              static_cast<uint32_t*>(out), words);
  return ifd::launched();
}

int ifd_decode_supported(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256) &&
         (group == 1 || group == 2 || group == 4 || group == 8);
}

int ifd_decode_mma_supported(int kv_dtype, int head_dim, int group) {
  return kv_dtype == IFD_KV_BF16 && (head_dim == 64 || head_dim == 128) &&
         (group == 1 || group == 2 || group == 4 || group == 8);
}

int ifd_decode_mma_blocks_per_sm(int head_dim, int group) {
  switch (head_dim) {
    case 64: return mma_blocks_by_group<64>(group);
    case 128: return mma_blocks_by_group<128>(group);
    default: return 0;
  }
}

int ifd_decode_cluster_capacity(int head_dim, int group, int splits, int warps) {
  if (warps != 4 && warps != 8) return 0;
  switch (head_dim) {
    case 64: return warps == 8 ? clusters_by_group<64, 8>(group, splits)
                               : clusters_by_group<64, 4>(group, splits);
    case 128: return warps == 8 ? clusters_by_group<128, 8>(group, splits)
                                : clusters_by_group<128, 4>(group, splits);
    default: return 0;
  }
}

int ifd_decode_attention(IfdPaged kv, const void* q, int rows, int n_heads, float scale,
                         const int32_t* seq, const int32_t* pos, const int32_t* chunks,
                         const int32_t* bt_off,
                         const int32_t* bt, int splits, float* part, int32_t* done, int mma,
                         void* out, void* stream) {
  if (rows == 0) return 0;
  const bool eight = kv.dtype == IFD_KV_Q8 || kv.dtype == IFD_KV_FP8;
  if ((kv.dtype != IFD_KV_BF16 && !eight) || (eight && (!kv.k_scale || !kv.v_scale)) ||
      splits < 1 || splits > kMaxSplits || n_heads % kv.n_kv_heads != 0 ||
      (splits > 1 && (!part || !done)) ||
      !ifd_decode_supported(kv.head_dim, n_heads / kv.n_kv_heads) ||
      (mma && !ifd_decode_mma_supported(kv.dtype, kv.head_dim, n_heads / kv.n_kv_heads)))
    return static_cast<int>(cudaErrorInvalidValue);
  const int g = n_heads / kv.n_kv_heads;
  const cudaStream_t s = ifd::as_stream(stream);
  switch (kv.head_dim) {
    case 256:
      return by_group<256>(g, kv, q, rows, scale, seq, pos, chunks, bt_off, bt, splits, part, done, mma, out, s);
    case 128:
      return by_group<128>(g, kv, q, rows, scale, seq, pos, chunks, bt_off, bt, splits, part, done, mma, out, s);
    default:
      return by_group<64>(g, kv, q, rows, scale, seq, pos, chunks, bt_off, bt, splits, part, done, mma, out, s);
  }
}

}  // extern "C"
