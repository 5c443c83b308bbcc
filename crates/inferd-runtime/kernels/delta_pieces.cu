// The chunked gated delta rule on tensor cores (key heads of up to 128): the same 64-token
// pieces at absolute multiples of 64 as delta_rule.cu's chunked kernel, in two kernels.
//
// 1. wy_kernel, a block per (piece, value head), every piece of the pass at once: what a
//    piece needs that does not depend on the state (the WY / UT form, formulas in
//    delta_rule.cu), into the workspace:
//      c  = the cumulative log decay over the piece,
//      A  = strictly lower, A_ij = beta_i (k_i·k_j) e^(c_i - c_j)          (mma)
//      P  = lower,          P_ij = (q_i·k_j) e^(c_i - c_j)                  (mma)
//      W  = (I + A)^-1 diag(beta e^c) K,  U = (I + A)^-1 diag(beta) V
//    W and U by forward substitution in f32: a thread per column, which is a system of its
//    own, held in registers (no barrier between rows).
// 2. scan_kernel, a block per (chunk, value head, kTC state columns), the chunk's pieces in
//    order through the state S [dk, kTC] in shared memory, each product an mma:
//      V' = U - W S,   O = (e^c ⊙ Q) S + P V',   S <- e^(c_L) S + (e^(c_L - c) ⊙ K)ᵀ V'
//
// Every product is mma.sync m16n8k8 in tf32 three times over (3xTF32): each operand split
// as x = hi + lo, both tf32, and a·b taken as hi·hi + hi·lo + lo·hi in f32 accumulators, so
// the results keep about f32's accuracy. (Plain tf32, 10-bit mantissas, moved a small
// hybrid model's logits by up to 0.2 against the token-by-token rule; docs/gpu-notes.md,
// session 10.) Shared-memory row strides are chosen so that a fragment's 32 reads hit 32
// banks: 4 mod 32 for row-major A operands read along k, 8 mod 32 for operands read across
// rows (B [k][n], and K read transposed). Pieces are staged by cp.async, 16 bytes a copy,
// where rows are 16-byte aligned (head widths that are multiples of 4), else by plain loads.
//
// pieces: DEVICE int32 [n_pieces, 2] = (chunk, piece of the chunk) of every piece of the
// pass's longer chunks; piece_base: DEVICE int32 [n_chunks], the first piece of each.
// Workspace per (piece, value head) (ws_floats): W [64][DKP], U [64][dv], P [64][64], c [64].
#include <mutex>

#include "common.cuh"

namespace {
constexpr int kPiece = 64;  // tokens a piece (crate::DELTA_CHUNK)
constexpr int kThreads = 256;
constexpr int kTC = 64;     // state columns a scan block

struct Geometry {
  int nk, nv, dk, dv;
};

// Piece q of a chunk of n tokens from absolute position start: its first token (from the
// chunk's) and its length.
struct Piece {
  int i0, len;
};
__device__ __forceinline__ int pieces_of(int start, int n) {
  return (start % kPiece + n + kPiece - 1) / kPiece;
}
__device__ __forceinline__ Piece piece_at(int start, int n, int q) {
  const int i0 = q == 0 ? 0 : q * kPiece - start % kPiece;
  return {i0, min(n - i0, kPiece - (start + i0) % kPiece)};
}

// Floats of one (piece, value head) in the workspace; dkp = dk rounded up to 16.
__host__ __device__ inline size_t pair_floats(int dkp, int dv) {
  return static_cast<size_t>(kPiece) * (dkp + dv + kPiece) + kPiece;
}

// An operand fragment split in two tf32 halves.
struct FragA {
  uint32_t hi[4], lo[4];
};
struct FragB {
  uint32_t hi[2], lo[2];
};
__device__ __forceinline__ void split(float x, uint32_t& hi, uint32_t& lo) {
  hi = ifd::tf32(x);
  lo = ifd::tf32(x - __uint_as_float(hi));
}
// A operand of m16n8k8 from row-major X [m][k] (stride ld): rows m0 + lane / 4 (+ 8),
// k k0 + lane % 4 (+ 4).
__device__ __forceinline__ void frag_a(FragA& f, const float* x, int ld, int m0, int k0,
                                       int lane) {
  const int r = m0 + (lane >> 2), c = k0 + (lane & 3);
  split(x[r * ld + c], f.hi[0], f.lo[0]);
  split(x[(r + 8) * ld + c], f.hi[1], f.lo[1]);
  split(x[r * ld + c + 4], f.hi[2], f.lo[2]);
  split(x[(r + 8) * ld + c + 4], f.hi[3], f.lo[3]);
}
// A operand from Xᵀ, X [k][m] (stride ld): A[m][k] = X[k][m].
__device__ __forceinline__ void frag_at(FragA& f, const float* x, int ld, int m0, int k0,
                                        int lane) {
  const int r = m0 + (lane >> 2), c = k0 + (lane & 3);
  split(x[c * ld + r], f.hi[0], f.lo[0]);
  split(x[c * ld + r + 8], f.hi[1], f.lo[1]);
  split(x[(c + 4) * ld + r], f.hi[2], f.lo[2]);
  split(x[(c + 4) * ld + r + 8], f.hi[3], f.lo[3]);
}
// B operand from k-major Y [k][n] (stride ld): k k0 + lane % 4 (+ 4), column n0 + lane / 4.
__device__ __forceinline__ void frag_b(FragB& f, const float* y, int ld, int k0, int n0,
                                       int lane) {
  const int k = k0 + (lane & 3), n = n0 + (lane >> 2);
  split(y[k * ld + n], f.hi[0], f.lo[0]);
  split(y[(k + 4) * ld + n], f.hi[1], f.lo[1]);
}
// B operand from n-major Y [n][k] (B = Yᵀ, stride ld).
__device__ __forceinline__ void frag_bt(FragB& f, const float* y, int ld, int k0, int n0,
                                        int lane) {
  const int k = k0 + (lane & 3), n = n0 + (lane >> 2);
  split(y[n * ld + k], f.hi[0], f.lo[0]);
  split(y[n * ld + k + 4], f.hi[1], f.lo[1]);
}
// c += a · b to about f32 accuracy: the small cross terms first.
__device__ __forceinline__ void mma3(float (&c)[4], const FragA& a, const FragB& b) {
  ifd::mma_tf32(c, a.lo, b.hi[0], b.hi[1]);
  ifd::mma_tf32(c, a.hi, b.lo[0], b.lo[1]);
  ifd::mma_tf32(c, a.hi, b.hi[0], b.hi[1]);
}

// acc[j] += A[m0 .. m0 + 16, 0 .. k_end) · B[0 .. k_end, n0 + 8j .. + 8) for j < NT: A
// row-major [m][k] (stride la), or with AT stored transposed [k][m]; B k-major (stride lb).
template <int NT, bool AT = false>
__device__ __forceinline__ void product(float (&acc)[NT][4], const float* a, int la, int m0,
                                        const float* b, int lb, int n0, int k_end, int lane) {
#pragma unroll 4
  for (int k0 = 0; k0 < k_end; k0 += 8) {
    FragA fa;
    if constexpr (AT)
      frag_at(fa, a, la, m0, k0, lane);
    else
      frag_a(fa, a, la, m0, k0, lane);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      FragB fb;
      frag_b(fb, b, lb, k0, n0 + 8 * j, lane);
      mma3(acc[j], fa, fb);
    }
  }
}

// Rows [0, kPiece) x columns [0, cols) of a row-major f32 tile into shared memory (stride
// lds), from src (stride ld) where row < rows and column < valid, zeros elsewhere; cols,
// valid, ld, lds and src's alignment in multiples of 4 floats when `vec`, else anything.
__device__ __forceinline__ void stage(float* dst, int lds, const float* src, size_t ld, int rows,
                                      int cols, int valid, bool vec) {
  if (vec) {
    for (int e = threadIdx.x; e < kPiece * cols / 4; e += kThreads) {
      const int i = e / (cols / 4), a = 4 * (e % (cols / 4));
      const bool ok = i < rows && a < valid;
      ifd::cp_async16_zfill(dst + i * lds + a, ok ? src + i * ld + a : src, ok);
    }
  } else {
    for (int e = threadIdx.x; e < kPiece * cols; e += kThreads) {
      const int i = e / cols, a = e % cols;
      dst[i * lds + a] = i < rows && a < valid ? src[i * ld + a] : 0.f;
    }
  }
}

// Inclusive prefix sums of v[0..kPiece) in place, by warp 0 (two values a lane).
__device__ __forceinline__ void prefix_sum_64(float* v) {
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  float a = v[lane], b = v[lane + 32];
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float ua = __shfl_sync(0xffffffffu, a, lane >= o ? lane - o : 0);
    const float ub = __shfl_sync(0xffffffffu, b, lane >= o ? lane - o : 0);
    if (lane >= o) {
      a += ua;
      b += ub;
    }
  }
  b += __shfl_sync(0xffffffffu, a, 31);
  v[lane] = a;
  v[lane + 32] = b;
}

// Element e (0..3) of an m16n8 accumulator: its row and column in the tile.
__device__ __forceinline__ int acc_row(int lane, int e) { return (lane >> 2) + (e >> 1) * 8; }
__device__ __forceinline__ int acc_col(int lane, int e) { return 2 * (lane & 3) + (e & 1); }

// Shared memory of wy_kernel, in floats: K and Q [kPiece][DKP + 4], A [kPiece][kPiece + 4],
// c and beta [kPiece].
template <int DKP>
constexpr size_t wy_smem_floats() {
  return 2 * static_cast<size_t>(kPiece) * (DKP + 4) + kPiece * (kPiece + 4) + 2 * kPiece;
}

// Grid (n_pieces, nv), kThreads threads.
template <int DKP>
__global__ void __launch_bounds__(kThreads)
    wy_kernel(const float* __restrict__ q, const float* __restrict__ k,
              const float* __restrict__ v, const float* __restrict__ g,
              const float* __restrict__ beta, const int32_t* __restrict__ chunks,
              const int32_t* __restrict__ pieces, Geometry geo, float* __restrict__ ws) {
  ifd::pdl_begin();
  constexpr int LD = DKP + 4;      // K, Q: A operands along k, K also B (n-major)
  constexpr int LA = kPiece + 4;   // A, read by rows as float4
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.y, dk = geo.dk, dv = geo.dv;
  const int32_t* ch = chunks + 4 * pieces[2 * blockIdx.x];
  const Piece pc = piece_at(ch[2], ch[1], pieces[2 * blockIdx.x + 1]);
  const int t0 = ch[0] + pc.i0, len = pc.len;
  const int hk = h / (geo.nv / geo.nk);
  const size_t kq_stride = static_cast<size_t>(geo.nk) * dk;
  const size_t v_stride = static_cast<size_t>(geo.nv) * dv;

  extern __shared__ float smem[];
  float* sK = smem;                // [kPiece][LD]
  float* sQ = sK + kPiece * LD;    // [kPiece][LD]
  float* sA = sQ + kPiece * LD;    // [kPiece][LA]
  float* sc = sA + kPiece * LA;    // [kPiece] cumulative log decay (rows past len: the last)
  float* sb = sc + kPiece;         // [kPiece] beta (rows past len: 0)
  {
    const size_t row0 = static_cast<size_t>(t0) * kq_stride + static_cast<size_t>(hk) * dk;
    const bool vec = dk % 4 == 0;
    stage(sK, LD, k + row0, kq_stride, len, DKP, dk, vec);
    stage(sQ, LD, q + row0, kq_stride, len, DKP, dk, vec);
    ifd::cp_async_commit();
  }
  if (tid < kPiece) {
    const size_t r = static_cast<size_t>(t0 + tid) * geo.nv + h;
    sc[tid] = tid < len ? g[r] : 0.f;
    sb[tid] = tid < len ? beta[r] : 0.f;
  }
  __syncthreads();
  prefix_sum_64(sc);  // rows past len add 0: they keep the last sum
  ifd::cp_async_wait<0>();
  __syncthreads();

  // A and P: warp w takes rows 16 (w % 4) .. + 15 and four 8-column tiles from 32 (w / 4);
  // tiles wholly above the diagonal are zeros.
  float* const pw = ws + (static_cast<size_t>(blockIdx.x) * geo.nv + h) * pair_floats(DKP, dv);
  float* const pu = pw + kPiece * DKP;
  float* const pp = pu + static_cast<size_t>(kPiece) * dv;
  float* const pcum = pp + kPiece * kPiece;
  {
    const int m0 = 16 * (warp & 3), nb = 32 * (warp >> 2);
    float acA[4][4] = {}, acP[4][4] = {};
#pragma unroll 2
    for (int k0 = 0; k0 < DKP; k0 += 8) {
      FragA aK, aQ;
      frag_a(aK, sK, LD, m0, k0, lane);
      frag_a(aQ, sQ, LD, m0, k0, lane);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n0 = nb + 8 * j;
        if (n0 > m0 + 15) continue;  // warp-uniform
        FragB b;
        frag_bt(b, sK, LD, k0, n0, lane);
        mma3(acA[j], aK, b);
        mma3(acP[j], aQ, b);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = m0 + acc_row(lane, e), jj = nb + 8 * j + acc_col(lane, e);
        const float decay = jj <= i ? __expf(sc[i] - sc[jj]) : 0.f;  // c falls: ≤ 1
        sA[i * LA + jj] = jj < i ? sb[i] * acA[j][e] * decay : 0.f;
        pp[i * kPiece + jj] = acP[j][e] * decay;
      }
  }
  if (tid < kPiece) pcum[tid] = sc[tid];
  __syncthreads();

  // W's columns (rhs beta e^c K) and U's (rhs beta V): x_i = rhs_i - Σ_(k<i) A_ik x_k.
  // A_ik is 0 for k >= i, so a row's last float4 of A may reach past i.
  for (int col = tid; col < dk + dv; col += kThreads) {
    float x[kPiece];
    if (col < dk) {
#pragma unroll
      for (int i = 0; i < kPiece; ++i) x[i] = sb[i] * __expf(sc[i]) * sK[i * LD + col];
    } else {
      const float* vc = v + static_cast<size_t>(h) * dv + (col - dk);
#pragma unroll
      for (int i = 0; i < kPiece; ++i)
        x[i] = i < len ? sb[i] * vc[static_cast<size_t>(t0 + i) * v_stride] : 0.f;
    }
#pragma unroll
    for (int i = 1; i < kPiece; ++i) {
      float acc = x[i];
#pragma unroll
      for (int k4 = 0; k4 < i; k4 += 4) {
        const float4 a4 = ifd::lds4(sA + i * LA + k4);
        acc = fmaf(-a4.x, x[k4], acc);
        acc = fmaf(-a4.y, x[k4 + 1], acc);
        acc = fmaf(-a4.z, x[k4 + 2], acc);
        acc = fmaf(-a4.w, x[k4 + 3], acc);
      }
      x[i] = acc;
    }
    if (col < dk) {
#pragma unroll
      for (int i = 0; i < kPiece; ++i) pw[i * DKP + col] = x[i];
    } else {
#pragma unroll
      for (int i = 0; i < kPiece; ++i) pu[static_cast<size_t>(i) * dv + (col - dk)] = x[i];
    }
  }
  // W's padding columns (dk .. DKP) are zeros: W S reads them against S's zero rows.
  for (int e = tid; e < kPiece * (DKP - dk); e += kThreads)
    pw[(e / (DKP - dk)) * DKP + dk + e % (DKP - dk)] = 0.f;
}

// Shared memory of scan_kernel, in floats: W and Q [kPiece][DKP + 4], K [kPiece][DKP + 8],
// P [kPiece][kPiece + 4], U / V' [kPiece][kTC + 8], S [DKP][kTC + 8], and e^c, e^(c_L - c)
// [kPiece].
template <int DKP>
constexpr size_t scan_smem_floats() {
  return 2 * static_cast<size_t>(kPiece) * (DKP + 4) + kPiece * (DKP + 8) +
         kPiece * (kPiece + 4) + kPiece * (kTC + 8) + static_cast<size_t>(DKP) * (kTC + 8) +
         2 * kPiece;
}

// Grid (nv * tiles, n_chunks), kThreads threads (one block a multiprocessor: its shared
// memory).
template <int DKP>
__global__ void __launch_bounds__(kThreads, 1)
    scan_kernel(const float* __restrict__ q, const float* __restrict__ k,
                float* __restrict__ state, const int32_t* __restrict__ chunks,
                const int32_t* __restrict__ piece_base, Geometry geo,
                const float* __restrict__ ws, float* __restrict__ out) {
  ifd::pdl_begin();
  constexpr int LA = DKP + 4;     // W, Q: A operands along k
  constexpr int LK = DKP + 8;     // K: the A operand transposed
  constexpr int LP = kPiece + 4;  // P: A operand along k
  constexpr int LB = kTC + 8;     // V', S: B operands [k][n]
  constexpr int NTV = kTC / 16;   // 8-column tiles a warp of V' and O
  constexpr int NTS = kTC / 8;    // of S
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t* ch = chunks + 4 * blockIdx.y;
  const int first = ch[0], n = ch[1], start = ch[2], slot = ch[3];
  if (n <= 1 || slot < 0) return;  // decode rows are the recurrent kernel's
  const int tiles = (geo.dv + kTC - 1) / kTC;
  const int h = blockIdx.x / tiles, j0 = (blockIdx.x % tiles) * kTC;
  const int dk = geo.dk, dv = geo.dv, cw = min(kTC, dv - j0);
  const int hk = h / (geo.nv / geo.nk);
  const size_t kq_stride = static_cast<size_t>(geo.nk) * dk;
  const size_t v_stride = static_cast<size_t>(geo.nv) * dv;
  const int base = piece_base[blockIdx.y], np = pieces_of(start, n);

  extern __shared__ float smem[];
  float* sW = smem;                 // [kPiece][LA]
  float* sQ = sW + kPiece * LA;     // [kPiece][LA]  e^c ⊙ Q
  float* sK = sQ + kPiece * LA;     // [kPiece][LK]  e^(c_L - c) ⊙ K
  float* sP = sK + kPiece * LK;     // [kPiece][LP]
  float* sV = sP + kPiece * LP;     // [kPiece][LB]  U, then V'
  float* sS = sV + kPiece * LB;     // [DKP][LB]
  float* se = sS + DKP * LB;        // [kPiece] e^c
  float* sd = se + kPiece;          // [kPiece] e^(c_L - c)

  float* S = state + (static_cast<size_t>(slot) * geo.nv + h) * dk * dv;
  for (int e = tid; e < DKP * kTC; e += kThreads) {
    const int a = e / kTC, col = e % kTC;
    sS[a * LB + col] =
        start == 0 || a >= dk || col >= cw ? 0.f : S[static_cast<size_t>(a) * dv + j0 + col];
  }
  const int m0 = 16 * (warp & 3), nb = (warp >> 2) * NTV * 8;  // this warp's V' / O tiles
  for (int pq = 0; pq < np; ++pq) {
    const Piece pc = piece_at(start, n, pq);
    const int t0 = first + pc.i0, len = pc.len;
    const float* pw = ws + (static_cast<size_t>(base + pq) * geo.nv + h) * pair_floats(DKP, dv);
    const float* pu = pw + kPiece * DKP;
    const float* pp = pu + static_cast<size_t>(kPiece) * dv;
    const float* pcum = pp + kPiece * kPiece;
    const float cl = pcum[len - 1];
    __syncthreads();  // the previous piece is done with every buffer, S written
    {
      const size_t row0 = static_cast<size_t>(t0) * kq_stride + static_cast<size_t>(hk) * dk;
      const bool vec = dk % 4 == 0;
      stage(sW, LA, pw, DKP, kPiece, DKP, DKP, true);
      stage(sP, LP, pp, kPiece, kPiece, kPiece, kPiece, true);
      stage(sV, LB, pu + j0, dv, kPiece, kTC, cw, dv % 4 == 0 && cw % 4 == 0);
      stage(sQ, LA, q + row0, kq_stride, len, DKP, dk, vec);
      stage(sK, LK, k + row0, kq_stride, len, DKP, dk, vec);
      ifd::cp_async_commit();
    }
    if (tid < kPiece) {
      se[tid] = __expf(pcum[tid]);
      sd[tid] = __expf(cl - pcum[tid]);
    }
    ifd::cp_async_wait<0>();
    __syncthreads();  // the piece staged, se, sd
    for (int e = tid; e < kPiece * DKP; e += kThreads) {
      const int i = e / DKP, a = e % DKP;
      sQ[i * LA + a] *= se[i];
      sK[i * LK + a] *= sd[i];
    }
    __syncthreads();

    // V' = U - W S: this warp's rows m0.., columns nb.. (NTV tiles).
    {
      float acc[NTV][4] = {};
      product(acc, sW, LA, m0, sS, LB, nb, DKP, lane);
#pragma unroll
      for (int j = 0; j < NTV; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          sV[(m0 + acc_row(lane, e)) * LB + nb + 8 * j + acc_col(lane, e)] -= acc[j][e];
    }
    __syncthreads();  // V' whole

    // O = (e^c ⊙ Q) S + P V' (P is lower: its k-steps past the tile's rows are zeros).
    {
      float o[NTV][4] = {};
      product(o, sQ, LA, m0, sS, LB, nb, DKP, lane);
      product(o, sP, LP, m0, sV, LB, nb, m0 + 16, lane);
#pragma unroll
      for (int j = 0; j < NTV; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = m0 + acc_row(lane, e), col = nb + 8 * j + acc_col(lane, e);
          if (i < len && col < cw)
            out[static_cast<size_t>(t0 + i) * v_stride + static_cast<size_t>(h) * dv + j0 + col] =
                o[j][e];
        }
    }
    __syncthreads();  // every warp is done reading S

    // S <- e^(c_L) S + Kdᵀ V': warp w takes S's rows 16 w .. + 15, every column.
    if (16 * warp < DKP) {
      const int r0 = 16 * warp;
      const float el = __expf(cl);
      float s[NTS][4];
#pragma unroll
      for (int j = 0; j < NTS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[j][e] = sS[(r0 + acc_row(lane, e)) * LB + 8 * j + acc_col(lane, e)] * el;
      product<NTS, true>(s, sK, LK, r0, sV, LB, 0, kPiece, lane);
#pragma unroll
      for (int j = 0; j < NTS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          sS[(r0 + acc_row(lane, e)) * LB + 8 * j + acc_col(lane, e)] = s[j][e];
    }
  }
  __syncthreads();
  for (int e = tid; e < dk * kTC; e += kThreads) {
    const int a = e / kTC, col = e % kTC;
    if (col < cw) S[static_cast<size_t>(a) * dv + j0 + col] = sS[a * LB + col];
  }
}

// Raises a kernel's dynamic shared memory limit once per device (host-side, outside any
// capture: the first pass of a shape runs eagerly); `done` per kernel and device.
template <typename K>
int allow_smem(K kernel, size_t bytes, bool (&done)[64]) {
  static std::mutex lock;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return static_cast<int>(e);
  if (dev < 0 || dev >= 64) return static_cast<int>(cudaErrorInvalidDevice);
  std::lock_guard<std::mutex> guard(lock);
  if (!done[dev]) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes));
    if (e != cudaSuccess) return static_cast<int>(e);
    done[dev] = true;
  }
  return 0;
}

template <int DKP>
int run(const float* q, const float* k, const float* v, const float* g, const float* beta,
        float* state, const int32_t* chunks, int n_chunks, const int32_t* pieces,
        const int32_t* piece_base, int n_pieces, Geometry geo, float* ws, float* out,
        cudaStream_t s) {
  static bool wy_raised[64], scan_raised[64];
  const size_t wy_bytes = wy_smem_floats<DKP>() * sizeof(float);
  const size_t scan_bytes = scan_smem_floats<DKP>() * sizeof(float);
  int err = allow_smem(wy_kernel<DKP>, wy_bytes, wy_raised);
  if (err == 0) err = allow_smem(scan_kernel<DKP>, scan_bytes, scan_raised);
  if (err != 0) return err;
  ifd::launch(wy_kernel<DKP>, dim3(n_pieces, geo.nv), kThreads, wy_bytes, s, q, k, v, g, beta,
              chunks, pieces, geo, ws);
  err = ifd::launched();
  if (err != 0) return err;
  const int tiles = (geo.dv + kTC - 1) / kTC;
  ifd::launch(scan_kernel<DKP>, dim3(geo.nv * tiles, n_chunks), kThreads, scan_bytes, s, q, k,
              state, chunks, piece_base, geo, static_cast<const float*>(ws), out);
  return ifd::launched();
}

int dkp_of(int dk) { return (dk + 15) / 16 * 16; }
}  // namespace

extern "C" {

int ifd_delta_pieces_supported(int dk, int dv) {
  return dk > 0 && dv > 0 && dk <= 128 &&
         scan_smem_floats<128>() * sizeof(float) <= ifd::max_smem_optin();
}

size_t ifd_delta_pieces_ws_floats(int n_pieces, int nv, int dk, int dv) {
  return static_cast<size_t>(n_pieces) * nv * pair_floats(dkp_of(dk), dv);
}

int ifd_delta_rule_pieces(const float* q, const float* k, const float* v, const float* g,
                          const float* beta, float* state, const int32_t* chunks, int n_chunks,
                          const int32_t* pieces, const int32_t* piece_base, int n_pieces, int nk,
                          int nv, int dk, int dv, float* ws, float* out, void* stream) {
  if (n_pieces == 0) return 0;
  const Geometry geo{nk, nv, dk, dv};
  if (nk <= 0 || nv <= 0 || nv % nk != 0 || dk <= 0 || dv <= 0 || dk > 128 || !ws)
    return static_cast<int>(cudaErrorInvalidValue);
  const cudaStream_t s = ifd::as_stream(stream);
  switch (dkp_of(dk)) {
#define IFD_DKP(D)                                                                              \
  case D:                                                                                       \
    return run<D>(q, k, v, g, beta, state, chunks, n_chunks, pieces, piece_base, n_pieces, geo, \
                  ws, out, s);
    IFD_DKP(16)
    IFD_DKP(32)
    IFD_DKP(48)
    IFD_DKP(64)
    IFD_DKP(80)
    IFD_DKP(96)
    IFD_DKP(112)
    IFD_DKP(128)
#undef IFD_DKP
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // extern "C"
