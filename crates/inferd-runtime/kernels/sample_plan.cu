// Planned draws on the device: one block per row runs a draw the host sampler planned
// (inferd-core's `Sampler::plan_draw`) over the row's logits and returns only the chosen
// token and the logprobs' pieces, so a full logits row never leaves the device. It follows
// the host sampler's arithmetic step for step, so the draw is the host's bit for bit:
//   1. penalties from a sparse list (each token once; f32 operations in the host's order,
//      never fused), 2. NaN -> -inf, +inf -> FLT_MAX (a row of -inf becomes all 0), then
//      DRY's penalties from a sparse list (each token once, an f32 subtraction),
//   3. the grammar mask (a row with nothing allowed left finite: the allowed become 0),
//   4. for logprobs: the maximum, the lane sum of exp(l - max) (1024 lanes, then a fixed
//      tree: inferd-core's `lane_sum`) and the k largest logits,
//   5. greedy: the argmax (lowest id on ties); else weights exp_nonpos((l - max) * 1/T)
//      (the host's own exp, ported), top-k and top-p as prefixes of the order (weight
//      descending, id ascending), masses in 2^-40 fixed point (exact in any order),
//      min-p, and the inverse-CDF draw over the kept ids in id order.
// Prefixes are found by radix selection over the keys' bits (four 8-bit digits, a
// histogram of count or mass per digit) and a scan in id order for ties; every sum is an
// integer or a fixed-order tree, so the result never depends on thread timing.
#include <cfloat>

#include "common.cuh"

namespace {
constexpr int T = 1024;       // threads per row
constexpr int MAX_TOP = 20;   // MAX_LOGPROBS

// Mirrors `SamplePlan` in backend/cuda/sample.rs (80 bytes).
struct SamplePlan {
  int32_t row;     // the logits row
  int32_t flags;   // 1: greedy, 2: logprobs
  int32_t top_k;   // 0: off
  int32_t n_top;   // top logprobs wanted (<= MAX_TOP)
  float inv_temp;
  float min_w;
  float repetition, presence, frequency;
  int32_t mask_off;    // first word of the row's mask in `words`, -1: none
  int32_t mask_words;
  int32_t pen_off;     // first entry of the row's penalties in `pens` (2 words each)
  int32_t pen_n;
  int32_t dry_off;     // first entry of the row's DRY penalties in `pens` (token, f32 bits)
  int32_t dry_n;
  int32_t pad;
  double top_p;        // 1: off
  double u;            // the PRNG's uniform
};

// Mirrors `SampleOut` in backend/cuda/sample.rs (184 bytes).
struct SampleOut {
  int32_t token;
  float chosen;        // the chosen token's processed logit
  float max;           // the largest processed logit
  int32_t n_top;
  double shifted_sum;  // lane sum of exp_nonpos(l - max)
  int32_t top_id[MAX_TOP];
  float top_logit[MAX_TOP];
};

using u64 = unsigned long long;

// The host's `exp_nonpos` (inferd-core sampling/detexp.rs), operation for operation.
__device__ __forceinline__ float exp_nonpos(float x) {
  const float LN2_HI = 0.693145751953125f, LN2_LO = 1.428606765330187e-6f;
  const float LOG2_E = 1.4426950408889634f, MIN_ARG = -87.0f;
  const float C[8] = {1.0f,         1.0f,          0.5f,           1.0f / 6.0f,
                      1.0f / 24.0f, 1.0f / 120.0f, 1.0f / 720.0f, 1.0f / 5040.0f};
  const float xc = fminf(fmaxf(x, MIN_ARG), 0.0f);
  const int k = static_cast<int>(__fsub_rn(__fmul_rn(xc, LOG2_E), 0.5f));
  const float kf = static_cast<float>(k);
  const float r = __fsub_rn(__fsub_rn(xc, __fmul_rn(kf, LN2_HI)), __fmul_rn(kf, LN2_LO));
  float p = C[7];
#pragma unroll
  for (int i = 6; i >= 0; --i) p = __fadd_rn(__fmul_rn(p, r), C[i]);
  const float scale = __uint_as_float(static_cast<unsigned>(k + 127) << 23);
  return x >= MIN_ARG ? __fmul_rn(p, scale) : 0.0f;
}

// (l - max) rounded to f32 through f64, as the host computes it.
__device__ __forceinline__ float shifted(float l, float max) {
  return __double2float_rn(__dsub_rn(static_cast<double>(l), static_cast<double>(max)));
}

__device__ __forceinline__ u64 mass(float w) {
  return static_cast<u64>(__dmul_rn(static_cast<double>(w), 1099511627776.0));  // 2^40
}

// A float's total order (Rust's `total_cmp`: -0 below +0) as an unsigned key.
__device__ __forceinline__ unsigned order_key(float x) {
  const unsigned u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The block's shared scratch.
struct Shared {
  u64 v[T];      // per-thread values of reductions and scans
  u64 hist[256];
  u64 scalar[4];
  int top_n;
  int top_id[MAX_TOP];
  float top_logit[MAX_TOP];
};

// `op` over the block's values (every thread gets the result).
template <class Op>
__device__ u64 block_reduce(Shared& s, u64 x, Op op) {
  const int t = threadIdx.x;
  s.v[t] = x;
  __syncthreads();
  for (int o = T / 2; o > 0; o >>= 1) {
    if (t < o) s.v[t] = op(s.v[t], s.v[t + o]);
    __syncthreads();
  }
  const u64 r = s.v[0];
  __syncthreads();
  return r;
}
__device__ u64 block_sum(Shared& s, u64 x) {
  return block_reduce(s, x, [](u64 a, u64 b) { return a + b; });
}
__device__ u64 block_max(Shared& s, u64 x) {
  return block_reduce(s, x, [](u64 a, u64 b) { return a > b ? a : b; });
}

// The inclusive lane sum of doubles (inferd-core `lane_sum`: lane t holds its strided
// partial; lane t adds lane t + o for o = 512, ..., 1).
__device__ double lane_sum(Shared& s, double x) {
  const int t = threadIdx.x;
  double* d = reinterpret_cast<double*>(s.v);
  d[t] = x;
  __syncthreads();
  for (int o = T / 2; o > 0; o >>= 1) {
    if (t < o) d[t] = __dadd_rn(d[t], d[t + o]);
    __syncthreads();
  }
  const double r = d[0];
  __syncthreads();
  return r;
}

// The element (in the order key descending) at which the running weight first reaches
// `need` (>= 1, at most the total weight): its key, and the weight still needed among the
// elements with exactly that key (ties are taken in id order by `first_reaching`).
template <class Key, class Weight>
__device__ void select_desc(Shared& s, int vocab, Key key, Weight weight, u64 need,
                            unsigned* key_out, u64* rem_out) {
  const int t = threadIdx.x;
  unsigned prefix = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    const unsigned hi = shift == 24 ? 0u : (~0u << (shift + 8));
    for (int d = t; d < 256; d += T) s.hist[d] = 0;
    __syncthreads();
    // Logits and weights crowd into few digits (their sign and exponent bits), so a warp's
    // lanes with equal digits add up first: one shared atomic per distinct digit.
    for (int base = 0; base < vocab; base += T) {
      const int i = base + t;
      unsigned bin = 256;  // none
      u64 w = 0;
      if (i < vocab) {
        const unsigned k = key(i);
        if ((k & hi) == prefix) w = weight(i);
        if (w) bin = (k >> shift) & 255;
      }
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      s.v[t] = w;
      __syncwarp();
      if (bin < 256 && (t & 31) == __ffs(peers) - 1) {
        u64 sum = 0;
        for (unsigned m = peers; m; m &= m - 1) sum += s.v[(t & ~31) + __ffs(m) - 1];
        atomicAdd(&s.hist[bin], sum);
      }
      __syncwarp();
    }
    __syncthreads();
    if (t == 0) {
      u64 acc = 0;
      int chosen = 0;
      for (int d = 255; d >= 0; --d) {
        if (acc + s.hist[d] >= need) {
          chosen = d;
          break;
        }
        acc += s.hist[d];
      }
      need -= acc;
      s.scalar[0] = prefix | (static_cast<unsigned>(chosen) << shift);
      s.scalar[1] = need;
    }
    __syncthreads();
    prefix = static_cast<unsigned>(s.scalar[0]);
    need = s.scalar[1];
    __syncthreads();
  }
  *key_out = prefix;
  *rem_out = need;
}

// The first id (in id order) at which the running weight reaches `need`, or -1. Each
// thread scans a contiguous stretch of ids.
template <class Weight>
__device__ int first_reaching(Shared& s, int vocab, Weight weight, u64 need) {
  const int t = threadIdx.x;
  const int per = (vocab + T - 1) / T;
  const int lo = min(vocab, t * per), hi = min(vocab, lo + per);
  u64 own = 0;
  for (int i = lo; i < hi; ++i) own += weight(i);
  // Inclusive scan of the stretches' sums (Hillis-Steele).
  s.v[t] = own;
  __syncthreads();
  for (int o = 1; o < T; o <<= 1) {
    const u64 add = t >= o ? s.v[t - o] : 0;
    __syncthreads();
    s.v[t] += add;
    __syncthreads();
  }
  const u64 incl = s.v[t], excl = incl - own;
  if (t == 0) s.scalar[2] = static_cast<u64>(-1);
  __syncthreads();
  if (excl < need && need <= incl) {
    u64 acc = excl;
    for (int i = lo; i < hi; ++i) {
      acc += weight(i);
      if (acc >= need) {
        s.scalar[2] = static_cast<u64>(i);
        break;
      }
    }
  }
  __syncthreads();
  const u64 r = s.scalar[2];
  __syncthreads();
  return r == static_cast<u64>(-1) ? -1 : static_cast<int>(r);
}

__global__ void __launch_bounds__(T)
    sample_plans_kernel(const float* __restrict__ logits, int vocab,
                        const SamplePlan* __restrict__ plans, const uint32_t* __restrict__ words,
                        const uint32_t* __restrict__ pens, float* __restrict__ scratch,
                        SampleOut* __restrict__ out) {
  ifd::pdl_begin();
  __shared__ Shared s;
  const int t = threadIdx.x;
  const SamplePlan p = plans[blockIdx.x];
  float* L = scratch + static_cast<size_t>(blockIdx.x) * 2 * vocab;  // [vocab] processed
  float* W = L + vocab;                                               // [vocab] weights
  const float* raw = logits + static_cast<size_t>(p.row) * vocab;

  // 1. Penalties (each token once in the list, so no two threads touch one logit).
#pragma unroll 4
  for (int i = t; i < vocab; i += T) L[i] = raw[i];
  __syncthreads();
  for (int e = t; e < p.pen_n; e += T) {
    const uint32_t tok = pens[2 * (p.pen_off + e)], cw = pens[2 * (p.pen_off + e) + 1];
    const uint32_t count = cw & 0x7fffffffu;
    float l = L[tok];
    if (cw >> 31) l = l > 0.0f ? __fdiv_rn(l, p.repetition) : __fmul_rn(l, p.repetition);
    if (count)
      l = __fsub_rn(l, __fadd_rn(__fmul_rn(static_cast<float>(count), p.frequency), p.presence));
    L[tok] = l;
  }
  __syncthreads();
  // 2. Special values.
  u64 any = 0;
#pragma unroll 4
  for (int i = t; i < vocab; i += T) {
    float l = L[i];
    l = isnan(l) ? -INFINITY : (l == INFINITY ? FLT_MAX : l);
    L[i] = l;
    any |= l > -INFINITY;
  }
  if (!block_max(s, any))
    for (int i = t; i < vocab; i += T) L[i] = 0.0f;
  __syncthreads();
  // DRY (each token once in the list, ids within the vocabulary).
  for (int e = t; e < p.dry_n; e += T) {
    const uint32_t tok = pens[2 * (p.dry_off + e)];
    if (tok < static_cast<uint32_t>(vocab))
      L[tok] = __fsub_rn(L[tok], __uint_as_float(pens[2 * (p.dry_off + e) + 1]));
  }
  __syncthreads();
  // 3. The grammar mask.
  if (p.mask_off >= 0) {
    const uint32_t* m = words + p.mask_off;
    auto allowed = [&](int i) { return (i >> 5) < p.mask_words && ((m[i >> 5] >> (i & 31)) & 1u); };
    any = 0;
#pragma unroll 4
    for (int i = t; i < vocab; i += T) {
      if (!allowed(i)) L[i] = -INFINITY;
      any |= L[i] > -INFINITY;
    }
    if (!block_max(s, any))
      for (int i = t; i < vocab; i += T)
        if (allowed(i)) L[i] = 0.0f;
    __syncthreads();
  }
  // The argmax and the maximum: (order key, ~id) packed, largest first; -0 counts as +0
  // (the host compares floats, where they are equal).
  u64 best = 0;
#pragma unroll 4
  for (int i = t; i < vocab; i += T) {
    const float l = L[i] == 0.0f ? 0.0f : L[i];
    const u64 k = (static_cast<u64>(order_key(l)) << 32) | (0xffffffffu - static_cast<unsigned>(i));
    if (k > best) best = k;
  }
  best = block_max(s, best);
  const int argmax = static_cast<int>(0xffffffffu - static_cast<unsigned>(best & 0xffffffffu));
  const float max = L[argmax];

  // 4. The logprobs' pieces.
  double sum = 0.0;
  int n_top = 0;
  if (p.flags & 2) {
    double own = 0.0;
#pragma unroll 4
    for (int i = t; i < vocab; i += T)
      own = __dadd_rn(own, static_cast<double>(exp_nonpos(shifted(L[i], max))));
    sum = lane_sum(s, own);
    n_top = min(min(p.n_top, MAX_TOP), vocab);
    if (n_top > 0) {
      unsigned kt;
      u64 rem;
      auto key = [&](int i) { return order_key(L[i]); };
      select_desc(s, vocab, key, [](int) { return u64{1}; }, static_cast<u64>(n_top), &kt, &rem);
      const int last = first_reaching(s, vocab, [&](int i) { return u64{key(i) == kt}; }, rem);
      if (t == 0) s.top_n = 0;
      __syncthreads();
#pragma unroll 4
      for (int i = t; i < vocab; i += T) {
        const unsigned k = key(i);
        if (k > kt || (k == kt && i <= last)) {
          const int slot = atomicAdd(&s.top_n, 1);
          if (slot < MAX_TOP) {
            s.top_id[slot] = i;
            s.top_logit[slot] = L[i];
          }
        }
      }
      __syncthreads();
      if (t == 0) {  // insertion sort: logit descending, id ascending
        const int n = min(s.top_n, MAX_TOP);
        for (int a = 1; a < n; ++a)
          for (int b = a; b > 0; --b) {
            const unsigned kb = order_key(s.top_logit[b]), ka = order_key(s.top_logit[b - 1]);
            if (kb > ka || (kb == ka && s.top_id[b] < s.top_id[b - 1])) {
              const int ti = s.top_id[b];
              s.top_id[b] = s.top_id[b - 1];
              s.top_id[b - 1] = ti;
              const float tl = s.top_logit[b];
              s.top_logit[b] = s.top_logit[b - 1];
              s.top_logit[b - 1] = tl;
            } else {
              break;
            }
          }
        n_top = n;
      }
    }
  }

  // 5. The token.
  int token = argmax;
  if (!(p.flags & 1)) {
#pragma unroll 4
    for (int i = t; i < vocab; i += T) W[i] = exp_nonpos(__fmul_rn(shifted(L[i], max), p.inv_temp));
    __syncthreads();
    auto wkey = [&](int i) { return __float_as_uint(W[i]); };
    // Top-k: the prefix ending at (k1, last1) of the order (weight down, id up).
    unsigned k1 = 0;
    int last1 = vocab;
    if (p.top_k > 0 && p.top_k < vocab) {
      u64 rem;
      select_desc(s, vocab, wkey, [](int) { return u64{1}; }, static_cast<u64>(p.top_k), &k1, &rem);
      last1 = first_reaching(s, vocab, [&](int i) { return u64{wkey(i) == k1}; }, rem);
    }
    auto in1 = [&](int i) {
      const unsigned k = wkey(i);
      return k > k1 || (k == k1 && i <= last1);
    };
    // Top-p over the top-k: the shortest prefix whose mass reaches the target.
    unsigned k2 = 0;
    int last2 = vocab;
    if (p.top_p < 1.0) {
      u64 own = 0;
#pragma unroll 4
      for (int i = t; i < vocab; i += T)
        if (in1(i)) own += mass(W[i]);
      const u64 total = block_sum(s, own);
      const u64 target = static_cast<u64>(ceil(__dmul_rn(p.top_p, static_cast<double>(total))));
      u64 rem;
      select_desc(s, vocab, wkey, [&](int i) { return in1(i) ? mass(W[i]) : u64{0}; }, target,
                  &k2, &rem);
      const u64 each = mass(__uint_as_float(k2));
      const u64 n = each ? (rem + each - 1) / each : 1;
      last2 = first_reaching(s, vocab, [&](int i) { return u64{in1(i) && wkey(i) == k2}; }, n);
    }
    auto kept = [&](int i) {
      const unsigned k = wkey(i);
      return in1(i) && (k > k2 || (k == k2 && i <= last2)) && W[i] >= p.min_w;
    };
    auto kept_mass = [&](int i) { return kept(i) ? mass(W[i]) : u64{0}; };
    u64 own = 0;
#pragma unroll 4
    for (int i = t; i < vocab; i += T) own += kept_mass(i);
    const u64 total = block_sum(s, own);
    const u64 target = static_cast<u64>(__dmul_rn(p.u, static_cast<double>(total)));
    token = first_reaching(s, vocab, kept_mass, target + 1);
    if (token < 0) {  // a total rounded up in f64: the last kept id with mass
      u64 last = 0;
#pragma unroll 4
      for (int i = t; i < vocab; i += T)
        if (kept_mass(i)) last = static_cast<u64>(i) + 1;
      last = block_max(s, last);
      token = last ? static_cast<int>(last - 1) : 0;
    }
  }

  if (t == 0) {
    SampleOut& o = out[blockIdx.x];
    o.token = token;
    o.chosen = L[token];
    o.max = max;
    o.shifted_sum = sum;
    o.n_top = n_top;
    for (int i = 0; i < n_top; ++i) {
      o.top_id[i] = s.top_id[i];
      o.top_logit[i] = s.top_logit[i];
    }
  }
}
}  // namespace

extern "C" int ifd_sample_plans(const float* logits, int vocab, const void* plans,
                                const uint32_t* words, const uint32_t* pens, int n,
                                float* scratch, void* out, void* stream) {
  if (n == 0) return 0;
  ifd::launch(sample_plans_kernel, n, T, 0, ifd::as_stream(stream), logits, vocab,
              static_cast<const SamplePlan*>(plans), words, pens, scratch,
              static_cast<SampleOut*>(out));
  return ifd::launched();
}
