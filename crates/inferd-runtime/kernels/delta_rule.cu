// The gated delta rule (Yang, Kautz & Hatamizadeh, 2024) of every chunk of a pass, from
// and into its state slot: per value head h (key head h / (nv / nk)) a state S
// [dk, dv] that per token decays by exp(g), is corrected toward mapping k to v with step
// beta, and is read by q (src/backend/cpu/delta_rule.rs has the formulas).
//
// The columns of S evolve independently (k, q, g and beta are shared, v and the output are
// per column), so both kernels split a head's dv columns into tiles of kCols, one block
// each: one-token chunks (decode) run the recurrent step, reading and writing each state
// element once; longer chunks run the chunked WY / UT form over 64-token pieces at
// absolute multiples of 64 (as the CPU does), the intra-piece products in shared memory.
//
// chunks: DEVICE int32 [n_chunks, 4] = (first token row, tokens, start position, state
// slot; slot < 0: a padding row, whose output is zero and which keeps no state).
// q, k f32 [n, nk * dk] (normalized, q scaled), v f32 [n, nv * dv], g, beta f32 [n, nv],
// state: the layer's plane f32 [slots, nv, dk, dv] -> out f32 [n, nv * dv].
#include <mutex>

#include "common.cuh"

namespace {
constexpr int kCols = 32;    // state columns per block
constexpr int kPiece = 64;   // tokens per piece of the chunked form (crate::DELTA_CHUNK)
constexpr int kThreads = 256;

struct Geometry {
  int nk, nv, dk, dv;
};

// Grid (nv * tiles, n_chunks), kCols threads: thread j holds column j0 + j of S in
// registers (KMAX >= dk), so the step reads and writes it once.
template <int KMAX>
__global__ void __launch_bounds__(kCols)
    recurrent_kernel(const float* __restrict__ q, const float* __restrict__ k,
                     const float* __restrict__ v, const float* __restrict__ g,
                     const float* __restrict__ beta, float* __restrict__ state,
                     const int32_t* __restrict__ chunks, Geometry geo, float* __restrict__ out) {
  ifd::pdl_begin();
  const int tiles = (geo.dv + kCols - 1) / kCols;
  const int h = blockIdx.x / tiles, j = (blockIdx.x % tiles) * kCols + threadIdx.x;
  const int32_t* c = chunks + 4 * blockIdx.y;
  if (c[1] != 1) return;  // a prompt piece: the chunked kernel's
  const int t = c[0], start = c[2], slot = c[3];
  const int hk = h / (geo.nv / geo.nk);
  __shared__ float sq[KMAX], sk[KMAX];
  const size_t kq_row = static_cast<size_t>(t) * geo.nk * geo.dk + static_cast<size_t>(hk) * geo.dk;
  for (int a = threadIdx.x; a < geo.dk; a += blockDim.x) {
    sq[a] = q[kq_row + a];
    sk[a] = k[kq_row + a];
  }
  __syncthreads();
  if (j >= geo.dv) return;
  const size_t hv = static_cast<size_t>(t) * geo.nv + h;
  float* o = out + hv * geo.dv + j;
  if (slot < 0) {
    *o = 0.f;
    return;
  }
  float* S = state + (static_cast<size_t>(slot) * geo.nv + h) * geo.dk * geo.dv + j;
  const float decay = expf(g[hv]), b = beta[hv];
  float s[KMAX];
  float mem = 0.f;  // what S predicts for k: (Sᵀk)_j
#pragma unroll
  for (int a = 0; a < KMAX; ++a) {
    if (a < geo.dk) {
      s[a] = start == 0 ? 0.f : S[static_cast<size_t>(a) * geo.dv] * decay;
      mem += sk[a] * s[a];
    }
  }
  const float delta = (v[hv * geo.dv + j] - mem) * b;
  float acc = 0.f;
#pragma unroll
  for (int a = 0; a < KMAX; ++a) {
    if (a < geo.dk) {
      s[a] += sk[a] * delta;
      acc += sq[a] * s[a];
      S[static_cast<size_t>(a) * geo.dv] = s[a];
    }
  }
  *o = acc;
}

// Shared memory of the chunked kernel, in floats: K and Q/W [kPiece, dk + 1] (padded rows),
// A and P [kPiece, kPiece + 1], U/V' [kPiece, kCols], S [dk, kCols], c, beta and the
// decays to the piece's end [kPiece].
__host__ __device__ inline size_t chunked_smem_floats(int dk) {
  return 2 * static_cast<size_t>(kPiece) * (dk + 1) + 2 * kPiece * (kPiece + 1) +
         kPiece * kCols + static_cast<size_t>(dk) * kCols + 3 * kPiece;
}

constexpr int kPer = kPiece * kCols / kThreads;  // (row, column) outputs per thread

// Grid (nv * tiles, n_chunks), kThreads threads, a block per (chunk, head, column tile).
// A piece of L tokens with cumulative log decay c_i (module docs of the CPU's version):
//   A_ij = beta_i (k_i·k_j) e^(c_i - c_j) (j < i),  P_ij = (q_i·k_j) e^(c_i - c_j) (j <= i)
//   (I + A) U = diag(beta) V,  (I + A) W = diag(beta e^c) K      (forward substitution)
//   V' = U - W S,  O = (e^c ⊙ Q) S + P V',  S <- e^(c_L) S + Σ_j e^(c_L - c_j) k_j ⊗ V'_j
__global__ void __launch_bounds__(kThreads)
    chunked_kernel(const float* __restrict__ q, const float* __restrict__ k,
                   const float* __restrict__ v, const float* __restrict__ g,
                   const float* __restrict__ beta, float* __restrict__ state,
                   const int32_t* __restrict__ chunks, Geometry geo, float* __restrict__ out) {
  ifd::pdl_begin();
  const int32_t* c = chunks + 4 * blockIdx.y;
  const int first = c[0], n = c[1], start = c[2], slot = c[3];
  if (n <= 1 || slot < 0) return;  // decode rows are the recurrent kernel's
  const int tiles = (geo.dv + kCols - 1) / kCols;
  const int h = blockIdx.x / tiles, j0 = (blockIdx.x % tiles) * kCols;
  const int cw = min(kCols, geo.dv - j0);  // live columns of this tile
  const int hk = h / (geo.nv / geo.nk);
  const int dk = geo.dk, ks = dk + 1, tid = threadIdx.x;

  extern __shared__ float smem[];
  float* sK = smem;                       // [kPiece][ks]
  float* sQW = sK + kPiece * ks;          // [kPiece][ks]  Q, then W
  float* sA = sQW + kPiece * ks;          // [kPiece][kPiece + 1]
  float* sP = sA + kPiece * (kPiece + 1); // [kPiece][kPiece + 1]
  float* sU = sP + kPiece * (kPiece + 1); // [kPiece][kCols]  U, then V'
  float* sS = sU + kPiece * kCols;        // [dk][kCols]
  float* sc = sS + dk * kCols;            // [kPiece] cumulative log decay
  float* sb = sc + kPiece;                // [kPiece] beta
  float* sd = sb + kPiece;                // [kPiece] e^(c_L - c_j)
  constexpr int ls = kPiece + 1;

  float* S = state + (static_cast<size_t>(slot) * geo.nv + h) * dk * geo.dv;
  for (int e = tid; e < dk * kCols; e += kThreads) {
    const int a = e / kCols, col = e % kCols;
    sS[e] = start == 0 || col >= cw ? 0.f : S[static_cast<size_t>(a) * geo.dv + j0 + col];
  }
  const size_t kq_stride = static_cast<size_t>(geo.nk) * dk;
  const size_t v_stride = static_cast<size_t>(geo.nv) * geo.dv;

  for (int i0 = 0; i0 < n;) {
    const int len = min(n - i0, kPiece - (start + i0) % kPiece);
    const int t0 = first + i0;
    __syncthreads();  // the previous piece is done with every buffer
    for (int e = tid; e < len * dk; e += kThreads) {
      const int i = e / dk, a = e % dk;
      const size_t src = static_cast<size_t>(t0 + i) * kq_stride + static_cast<size_t>(hk) * dk + a;
      sK[i * ks + a] = k[src];
      sQW[i * ks + a] = q[src];
    }
    for (int e = tid; e < len * kCols; e += kThreads) {
      const int i = e / kCols, col = e % kCols;
      sU[e] = col < cw ? v[static_cast<size_t>(t0 + i) * v_stride +
                           static_cast<size_t>(h) * geo.dv + j0 + col]
                       : 0.f;
    }
    if (tid == 0) {
      float acc = 0.f;
      for (int i = 0; i < len; ++i) {
        const size_t r = static_cast<size_t>(t0 + i) * geo.nv + h;
        acc += g[r];
        sc[i] = acc;
        sb[i] = beta[r];
      }
    }
    __syncthreads();
    // A (strictly lower) and P (lower with the diagonal).
    for (int e = tid; e < len * kPiece; e += kThreads) {
      const int i = e / kPiece, jj = e % kPiece;
      float a_ij = 0.f, p_ij = 0.f;
      if (jj <= i) {
        float kk = 0.f, qk = 0.f;
        for (int a = 0; a < dk; ++a) {
          const float kj = sK[jj * ks + a];
          kk += sK[i * ks + a] * kj;
          qk += sQW[i * ks + a] * kj;
        }
        const float decay = expf(sc[i] - sc[jj]);
        if (jj < i) a_ij = sb[i] * kk * decay;
        p_ij = qk * decay;
      }
      sA[i * ls + jj] = a_ij;
      sP[i * ls + jj] = p_ij;
    }
    // O's inter-piece part (e^c ⊙ Q) S, kept in registers.
    float o[kPer];
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      const int e = tid + r * kThreads, i = e / kCols, col = e % kCols;
      float acc = 0.f;
      if (i < len) {
        const float ei = expf(sc[i]);
        for (int a = 0; a < dk; ++a) acc += sQW[i * ks + a] * ei * sS[a * kCols + col];
      }
      o[r] = acc;
    }
    __syncthreads();  // Q is read: its buffer takes W
    // Forward substitution, a row at a time: W_i (dk threads) and U_i (kCols threads).
    for (int i = 0; i < len; ++i) {
      const float ei = expf(sc[i]);
      for (int e = tid; e < dk + kCols; e += kThreads) {
        if (e < dk) {
          float wv = sK[i * ks + e] * sb[i] * ei;
          for (int jj = 0; jj < i; ++jj) wv += -sA[i * ls + jj] * sQW[jj * ks + e];
          sQW[i * ks + e] = wv;
        } else {
          const int col = e - dk;
          float uv = sU[i * kCols + col] * sb[i];
          for (int jj = 0; jj < i; ++jj) uv += -sA[i * ls + jj] * sU[jj * kCols + col];
          sU[i * kCols + col] = uv;
        }
      }
      __syncthreads();
    }
    // V' = U - W S, in place (each thread its own elements).
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      const int e = tid + r * kThreads, i = e / kCols, col = e % kCols;
      if (i < len) {
        float acc = 0.f;
        for (int a = 0; a < dk; ++a) acc += -sQW[i * ks + a] * sS[a * kCols + col];
        sU[e] += acc;
      }
    }
    const float last = sc[len - 1], total = expf(last);
    if (tid < len) sd[tid] = expf(last - sc[tid]);
    __syncthreads();
    // O = inter + P V', written out.
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      const int e = tid + r * kThreads, i = e / kCols, col = e % kCols;
      if (i < len && col < cw) {
        float acc = 0.f;
        for (int jj = 0; jj <= i; ++jj) acc += sP[i * ls + jj] * sU[jj * kCols + col];
        out[static_cast<size_t>(t0 + i) * v_stride + static_cast<size_t>(h) * geo.dv + j0 + col] =
            o[r] + acc;
      }
    }
    // S <- e^(c_L) S + Kdᵀ V'   (each thread its own (a, column) elements)
    for (int e = tid; e < dk * kCols; e += kThreads) {
      const int a = e / kCols, col = e % kCols;
      float acc = 0.f;
      for (int jj = 0; jj < len; ++jj) acc += sK[jj * ks + a] * sd[jj] * sU[jj * kCols + col];
      sS[e] = sS[e] * total + acc;
    }
    i0 += len;
  }
  __syncthreads();
  for (int e = tid; e < dk * kCols; e += kThreads) {
    const int a = e / kCols, col = e % kCols;
    if (col < cw) S[static_cast<size_t>(a) * geo.dv + j0 + col] = sS[e];
  }
}

template <int KMAX>
int launch_recurrent(const float* q, const float* k, const float* v, const float* g,
                     const float* beta, float* state, const int32_t* chunks, int n_chunks,
                     Geometry geo, float* out, cudaStream_t s) {
  const int tiles = (geo.dv + kCols - 1) / kCols;
  ifd::launch(recurrent_kernel<KMAX>, dim3(geo.nv * tiles, n_chunks), kCols, 0, s, q, k, v, g, beta,
              state, chunks, geo, out);
  return ifd::launched();
}

bool geometry_ok(const Geometry& g) {
  return g.nk > 0 && g.nv > 0 && g.nv % g.nk == 0 && g.dk > 0 && g.dv > 0;
}
}  // namespace

extern "C" {

int ifd_delta_rule_recurrent(const float* q, const float* k, const float* v, const float* g,
                             const float* beta, float* state, const int32_t* chunks,
                             int n_chunks, int nk, int nv, int dk, int dv, float* out,
                             void* stream) {
  if (n_chunks == 0) return 0;
  const Geometry geo{nk, nv, dk, dv};
  if (!geometry_ok(geo) || dk > 256) return static_cast<int>(cudaErrorInvalidValue);
  const cudaStream_t s = ifd::as_stream(stream);
  if (dk <= 32) return launch_recurrent<32>(q, k, v, g, beta, state, chunks, n_chunks, geo, out, s);
  if (dk <= 64) return launch_recurrent<64>(q, k, v, g, beta, state, chunks, n_chunks, geo, out, s);
  if (dk <= 128)
    return launch_recurrent<128>(q, k, v, g, beta, state, chunks, n_chunks, geo, out, s);
  return launch_recurrent<256>(q, k, v, g, beta, state, chunks, n_chunks, geo, out, s);
}

int ifd_delta_rule_chunked_supported(int dk) {
  return dk > 0 && chunked_smem_floats(dk) * sizeof(float) <= ifd::max_smem_optin();
}

int ifd_delta_rule_chunked(const float* q, const float* k, const float* v, const float* g,
                           const float* beta, float* state, const int32_t* chunks, int n_chunks,
                           int nk, int nv, int dk, int dv, float* out, void* stream) {
  if (n_chunks == 0) return 0;
  const Geometry geo{nk, nv, dk, dv};
  if (!geometry_ok(geo)) return static_cast<int>(cudaErrorInvalidValue);
  const size_t bytes = chunked_smem_floats(dk) * sizeof(float);
  // Raised, per device, to the largest size asked so far (a host-side setting, not stream
  // work; the first pass of a shape runs eagerly, outside any capture).
  {
    constexpr int kDevices = 64;
    static std::mutex lock;
    static size_t raised[kDevices];
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return static_cast<int>(e);
    if (dev < 0 || dev >= kDevices) return static_cast<int>(cudaErrorInvalidDevice);
    std::lock_guard<std::mutex> guard(lock);
    if (bytes > (48u << 10) && bytes > raised[dev]) {
      e = cudaFuncSetAttribute(chunked_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes));
      if (e != cudaSuccess) return static_cast<int>(e);
      raised[dev] = bytes;
    }
  }
  const int tiles = (dv + kCols - 1) / kCols;
  ifd::launch(chunked_kernel, dim3(nv * tiles, n_chunks), kThreads, bytes, ifd::as_stream(stream),
              q, k, v, g, beta, state, chunks, geo, out);
  return ifd::launched();
}

}  // extern "C"
