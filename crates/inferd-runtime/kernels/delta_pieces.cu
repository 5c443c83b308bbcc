// The chunked gated delta rule on tensor cores (key heads of up to 128): the same 64-token
// pieces at absolute multiples of 64 as delta_rule.cu's chunked kernel, in two kernels.
//
// 1. wy_kernel, a block per (piece, value head), every piece of the pass at once: what a
//    piece needs that does not depend on the state (the WY / UT form, formulas in
//    delta_rule.cu), into the workspace:
//      c  = the cumulative log decay over the piece,
//      A  = strictly lower, A_ij = beta_i (k_i·k_j) e^(c_i - c_j)          (mma, tf32)
//      P  = lower,          P_ij = (q_i·k_j) e^(c_i - c_j)                  (mma, tf32)
//      W  = (I + A)^-1 diag(beta e^c) K,  U = (I + A)^-1 diag(beta) V
//    W and U by forward substitution in f32: a thread per column, which is a system of its
//    own, held in registers (no barrier between rows).
// 2. scan_kernel, a block per (chunk, value head, kTC state columns), the chunk's pieces in
//    order through the state S [dk, kTC] in shared memory, each product an mma (tf32):
//      V' = U - W S,   O = (e^c ⊙ Q) S + P V',   S <- e^(c_L) S + (e^(c_L - c) ⊙ K)ᵀ V'
//
// mma.sync m16n8k8 tf32 (f32 accumulate): operands are rounded to tf32 as they are read
// from shared memory. Shared-memory row strides are chosen so that a fragment's 32 reads
// hit 32 banks: 4 mod 32 for row-major A operands read along k, 8 mod 32 for operands
// read across rows (B [k][n], and K read transposed).
//
// pieces: DEVICE int32 [n_pieces, 2] = (chunk, piece of the chunk) of every piece of the
// pass's longer chunks; piece_base: DEVICE int32 [n_chunks], the first piece of each.
// Workspace per (piece, value head) (ws_floats): W [64][DKP], U [64][dv], P [64][64], c [64].
#include "common.cuh"

namespace {
constexpr int kPiece = 64;  // tokens a piece (crate::DELTA_CHUNK)
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
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

// A operand of m16n8k8 from row-major X [m][k] (stride ld): rows m0 + lane / 4 (+ 8),
// k k0 + lane % 4 (+ 4).
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const float* x, int ld, int m0, int k0,
                                       int lane) {
  const int r = m0 + (lane >> 2), c = k0 + (lane & 3);
  a[0] = ifd::tf32(x[r * ld + c]);
  a[1] = ifd::tf32(x[(r + 8) * ld + c]);
  a[2] = ifd::tf32(x[r * ld + c + 4]);
  a[3] = ifd::tf32(x[(r + 8) * ld + c + 4]);
}
// A operand from Xᵀ, X [k][m] (stride ld): A[m][k] = X[k][m].
__device__ __forceinline__ void frag_at(uint32_t (&a)[4], const float* x, int ld, int m0, int k0,
                                        int lane) {
  const int r = m0 + (lane >> 2), c = k0 + (lane & 3);
  a[0] = ifd::tf32(x[c * ld + r]);
  a[1] = ifd::tf32(x[c * ld + r + 8]);
  a[2] = ifd::tf32(x[(c + 4) * ld + r]);
  a[3] = ifd::tf32(x[(c + 4) * ld + r + 8]);
}
// B operand from k-major Y [k][n] (stride ld): k k0 + lane % 4 (+ 4), column n0 + lane / 4.
__device__ __forceinline__ void frag_b(uint32_t& b0, uint32_t& b1, const float* y, int ld, int k0,
                                       int n0, int lane) {
  const int k = k0 + (lane & 3), n = n0 + (lane >> 2);
  b0 = ifd::tf32(y[k * ld + n]);
  b1 = ifd::tf32(y[(k + 4) * ld + n]);
}
// B operand from n-major Y [n][k] (B = Yᵀ, stride ld).
__device__ __forceinline__ void frag_bt(uint32_t& b0, uint32_t& b1, const float* y, int ld,
                                        int k0, int n0, int lane) {
  const int k = k0 + (lane & 3), n = n0 + (lane >> 2);
  b0 = ifd::tf32(y[n * ld + k]);
  b1 = ifd::tf32(y[n * ld + k + 4]);
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
  for (int e = tid; e < kPiece * DKP; e += kThreads) {
    const int i = e / DKP, a = e % DKP;
    float kv = 0.f, qv = 0.f;
    if (i < len && a < dk) {
      const size_t src = static_cast<size_t>(t0 + i) * kq_stride + static_cast<size_t>(hk) * dk + a;
      kv = k[src];
      qv = q[src];
    }
    sK[i * LD + a] = kv;
    sQ[i * LD + a] = qv;
  }
  if (tid == 0) {
    float acc = 0.f;
    for (int i = 0; i < kPiece; ++i) {
      const size_t r = static_cast<size_t>(t0 + i) * geo.nv + h;
      if (i < len) acc += g[r];
      sc[i] = acc;
      sb[i] = i < len ? beta[r] : 0.f;
    }
  }
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
      uint32_t aK[4], aQ[4];
      frag_a(aK, sK, LD, m0, k0, lane);
      frag_a(aQ, sQ, LD, m0, k0, lane);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n0 = nb + 8 * j;
        if (n0 > m0 + 15) continue;  // warp-uniform
        uint32_t b0, b1;
        frag_bt(b0, b1, sK, LD, k0, n0, lane);
        ifd::mma_tf32(acA[j], aK, b0, b1);
        ifd::mma_tf32(acP[j], aQ, b0, b1);
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

// Grid (nv * tiles, n_chunks), kThreads threads.
template <int DKP>
__global__ void __launch_bounds__(kThreads)
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
    if (tid < kPiece) {
      se[tid] = __expf(pcum[tid]);
      sd[tid] = __expf(cl - pcum[tid]);
    }
    for (int e = tid; e < kPiece * DKP / 4; e += kThreads) {
      const int i = e / (DKP / 4), a = 4 * (e % (DKP / 4));
      ifd::sts4(sW + i * LA + a, ifd::ldg4(pw + i * DKP + a));
    }
    for (int e = tid; e < kPiece * kPiece / 4; e += kThreads) {
      const int i = e / (kPiece / 4), j = 4 * (e % (kPiece / 4));
      ifd::sts4(sP + i * LP + j, ifd::ldg4(pp + i * kPiece + j));
    }
    for (int e = tid; e < kPiece * kTC; e += kThreads) {
      const int i = e / kTC, col = e % kTC;
      sV[i * LB + col] = col < cw ? pu[static_cast<size_t>(i) * dv + j0 + col] : 0.f;
    }
    __syncthreads();  // se, sd
    for (int e = tid; e < kPiece * DKP; e += kThreads) {
      const int i = e / DKP, a = e % DKP;
      float qv = 0.f, kv = 0.f;
      if (i < len && a < dk) {
        const size_t src = static_cast<size_t>(t0 + i) * kq_stride + static_cast<size_t>(hk) * dk + a;
        qv = q[src] * se[i];
        kv = k[src] * sd[i];
      }
      sQ[i * LA + a] = qv;
      sK[i * LK + a] = kv;
    }
    __syncthreads();

    // V' = U - W S: this warp's rows m0.., columns nb.. (NTV tiles).
    {
      float acc[NTV][4] = {};
#pragma unroll 4
      for (int k0 = 0; k0 < DKP; k0 += 8) {
        uint32_t a[4];
        frag_a(a, sW, LA, m0, k0, lane);
#pragma unroll
        for (int j = 0; j < NTV; ++j) {
          uint32_t b0, b1;
          frag_b(b0, b1, sS, LB, k0, nb + 8 * j, lane);
          ifd::mma_tf32(acc[j], a, b0, b1);
        }
      }
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
#pragma unroll 4
      for (int k0 = 0; k0 < DKP; k0 += 8) {
        uint32_t a[4];
        frag_a(a, sQ, LA, m0, k0, lane);
#pragma unroll
        for (int j = 0; j < NTV; ++j) {
          uint32_t b0, b1;
          frag_b(b0, b1, sS, LB, k0, nb + 8 * j, lane);
          ifd::mma_tf32(o[j], a, b0, b1);
        }
      }
      for (int k0 = 0; k0 < m0 + 16; k0 += 8) {
        uint32_t a[4];
        frag_a(a, sP, LP, m0, k0, lane);
#pragma unroll
        for (int j = 0; j < NTV; ++j) {
          uint32_t b0, b1;
          frag_b(b0, b1, sV, LB, k0, nb + 8 * j, lane);
          ifd::mma_tf32(o[j], a, b0, b1);
        }
      }
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
#pragma unroll 2
      for (int k0 = 0; k0 < kPiece; k0 += 8) {
        uint32_t a[4];
        frag_at(a, sK, LK, r0, k0, lane);
#pragma unroll
        for (int j = 0; j < NTS; ++j) {
          uint32_t b0, b1;
          frag_b(b0, b1, sV, LB, k0, 8 * j, lane);
          ifd::mma_tf32(s[j], a, b0, b1);
        }
      }
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
// capture: the first pass of a shape runs eagerly).
template <typename K>
int allow_smem(K kernel, size_t bytes, int* done) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return static_cast<int>(e);
  if (dev < 0 || dev >= 64) return static_cast<int>(cudaErrorInvalidDevice);
  if (!done[dev]) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes));
    if (e != cudaSuccess) return static_cast<int>(e);
    done[dev] = 1;
  }
  return 0;
}

template <int DKP>
int run(const float* q, const float* k, const float* v, const float* g, const float* beta,
        float* state, const int32_t* chunks, int n_chunks, const int32_t* pieces,
        const int32_t* piece_base, int n_pieces, Geometry geo, float* ws, float* out,
        cudaStream_t s) {
  static int wy_raised[64], scan_raised[64];
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
  if (dk <= 0 || dv <= 0 || dk > 128) return 0;
  int dev = 0, max_smem = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
          cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return scan_smem_floats<128>() * sizeof(float) <= static_cast<size_t>(max_smem);
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
