// A chain of matrix-vector products in one persistent kernel: y_s = W_s · x_s for steps
// s = 0, 1, …, where x_s (f32, rounded to bf16 on its way into shared memory) is written
// by earlier steps, so step s may start only once every block is done with step s - 1.
//
// Why one kernel: a decode step of one row is a chain of products, each bound by reading
// its weight once. Launched one kernel a product, a multiprocessor's stream of weight bytes
// stops at every boundary: the next kernel's blocks can issue their first loads early
// (programmatic dependent launch) only where the last blocks of the one before have left
// room, and only as many bytes as their registers hold. Here each warp streams its rows of
// every step through a ring of bulk copies into shared memory, and that stream does not
// depend on the data: while a block waits for the step before to finish everywhere, its
// ring keeps filling with the next step's weights, so the memory never waits for the
// chain, only the arithmetic does.
//
// Shape: one block a multiprocessor (gridDim.x the SM count, every block resident: the
// launch is cooperative), kChainWarps warps. Step s's rows are split evenly over the
// grid's warps; a warp takes its rows' bytes in pieces of PIECE bytes (a row of k bf16 is
// ceil(2k / PIECE) pieces), `stages` pieces in flight. A lane takes the same elements of
// a row in the same order as gemv.cu's wave kernel, so the two give the same bits.
//
// Between steps: a grid-wide barrier (a counter a step, zeroed before the launch; a block
// adds one when its rows are written and waits for gridDim.x), then x_{s+1} is read
// through L2 (never L1, which another multiprocessor's writes do not reach).
#include "common.cuh"

namespace {
using ifd::bf16;

constexpr int kChainWarps = 8;
constexpr size_t kBarBytes = 1024;  // the ring's barriers: [kChainWarps][stages ≤ 16]
constexpr int kXLoads = 12;         // 16-byte loads of x a thread has in flight

// The rows of a step that grid warp gw of nw takes: [o0, o1).
__device__ __forceinline__ void rows_of(int out, long long gw, long long nw, int& o0, int& o1) {
  o0 = static_cast<int>(out * gw / nw);
  o1 = static_cast<int>(out * (gw + 1) / nw);
}

// Where a warp's stream of pieces stands: step s, its r-th row of the step, piece j.
struct Cursor {
  int s = 0, r = 0, j = 0;
  int o0 = 0, rows = 0, pieces = 0;  // the step's: first row, rows of this warp, pieces a row
};

// Moves `c` to the next piece that exists (past steps where the warp has no rows).
__device__ __forceinline__ void settle(Cursor& c, const IfdChainStep* steps, int n_steps,
                                       long long gw, long long nw, int piece) {
  while (c.s < n_steps) {
    if (c.rows == 0 && c.r == 0 && c.j == 0) {
      int o1;
      rows_of(steps[c.s].out, gw, nw, c.o0, o1);
      c.rows = o1 - c.o0;
      c.pieces = static_cast<int>((static_cast<size_t>(steps[c.s].k) * sizeof(bf16) + piece - 1) / piece);
    }
    if (c.r < c.rows) return;
    ++c.s;
    c.r = c.j = c.rows = 0;
  }
}
__device__ __forceinline__ void advance(Cursor& c, const IfdChainStep* steps, int n_steps,
                                        long long gw, long long nw, int piece) {
  if (++c.j == c.pieces) {
    c.j = 0;
    ++c.r;
  }
  settle(c, steps, n_steps, gw, nw, piece);
}

template <int PIECE>
__global__ void __launch_bounds__(kChainWarps * 32, 1)
    chain_kernel(const IfdChainStep* __restrict__ steps, int n_steps, int stages, int max_k,
                 unsigned* __restrict__ done) {
  extern __shared__ float smem[];
  // bars: u64 [kChainWarps][stages]; ring: [kChainWarps][stages][PIECE] bytes of W;
  // xs: bf16 [max_k], the step's x
  unsigned char* const base = reinterpret_cast<unsigned char*>(smem);
  uint64_t* const bars = reinterpret_cast<uint64_t*>(base);
  unsigned char* const ring = base + kBarBytes;
  bf16* const xs = reinterpret_cast<bf16*>(ring + static_cast<size_t>(kChainWarps) * stages * PIECE);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long nw = static_cast<long long>(gridDim.x) * kChainWarps;
  const long long gw = static_cast<long long>(blockIdx.x) * kChainWarps + warp;
  unsigned char* const mine = ring + static_cast<size_t>(warp) * stages * PIECE;
  uint64_t* const full = bars + warp * stages;

  // Lane 0 issues the warp's pieces `stages` ahead of the arithmetic, across steps.
  Cursor ahead;
  uint64_t policy = 0;
  long long issued = 0;
  const auto issue = [&]() {
    const IfdChainStep& st = steps[ahead.s];
    const size_t row_bytes = static_cast<size_t>(st.k) * sizeof(bf16);
    const size_t at = static_cast<size_t>(ahead.o0 + ahead.r) * row_bytes +
                      static_cast<size_t>(ahead.j) * PIECE;
    const size_t left = row_bytes - static_cast<size_t>(ahead.j) * PIECE;
    const uint32_t bytes = static_cast<uint32_t>(left < PIECE ? left : PIECE);
    const int stage = static_cast<int>(issued % stages);
    ifd::bulk_load(mine + static_cast<size_t>(stage) * PIECE,
                   reinterpret_cast<const unsigned char*>(st.w) + at, bytes, &full[stage], policy);
    ++issued;
    advance(ahead, steps, n_steps, gw, nw, PIECE);
  };
  // The weights do not depend on the kernel before: the first pieces are on their way
  // before the wait for it.
  if (lane == 0) {
    for (int s = 0; s < stages; ++s) ifd::bar_init(&full[s], 1);
    ifd::bar_init_fence();
    policy = ifd::evict_first();
    settle(ahead, steps, n_steps, gw, nw, PIECE);
    for (int s = 0; s < stages && ahead.s < n_steps; ++s) issue();
  }
  ifd::pdl_begin();

  long long used = 0;  // pieces this warp has taken from its ring
  for (int s = 0; s < n_steps; ++s) {
    const IfdChainStep& st = steps[s];
    if (s > 0 && done != nullptr) {
      // Every block's rows of step s - 1 written before any block reads x_s.
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(done + s - 1, 1u);
        while (ifd::ld_acquire(done + s - 1) < gridDim.x) {
        }
        __threadfence();
      }
    }
    __syncthreads();  // (also: the ring's barriers initialized before any warp waits)
    // x: all of a thread's loads issued before the first is used (one round trip to L2,
    // not one a vector: this is on the chain's path at every step).
    for (int i0 = 0; i0 < st.k / 4; i0 += kXLoads * kChainWarps * 32) {
      float4 v[kXLoads];
#pragma unroll
      for (int u = 0; u < kXLoads; ++u) {
        const int i = i0 + threadIdx.x + u * kChainWarps * 32;
        if (i < st.k / 4) v[u] = __ldcg(reinterpret_cast<const float4*>(st.x) + i);
      }
#pragma unroll
      for (int u = 0; u < kXLoads; ++u) {
        const int i = i0 + threadIdx.x + u * kChainWarps * 32;
        if (i < st.k / 4) ifd::store4(xs + 4 * i, v[u].x, v[u].y, v[u].z, v[u].w);
      }
    }
    __syncthreads();
    int o0, o1;
    rows_of(st.out, gw, nw, o0, o1);
    const int kv = st.k >> 3;  // 16-byte vectors in a row
    const int pieces = static_cast<int>((static_cast<size_t>(st.k) * sizeof(bf16) + PIECE - 1) / PIECE);
    const uint4* const xv = reinterpret_cast<const uint4*>(xs);
    for (int o = o0; o < o1; ++o) {
      float acc = 0.f;
      for (int j = 0; j < pieces; ++j) {
        const int stage = static_cast<int>(used % stages);
        ifd::bar_wait(&full[stage], static_cast<uint32_t>((used / stages) & 1));
        const uint4* const wp = reinterpret_cast<const uint4*>(mine + static_cast<size_t>(stage) * PIECE);
        const int v0 = j * (PIECE / 16);  // the piece's first vector in the row
        const int nv = min(PIECE / 16, kv - v0);
#pragma unroll
        for (int u = 0; u < PIECE / 16 / 32; ++u) {
          const int v = lane + 32 * u;
          if (v < nv) acc = ifd::dot8(wp[v], xv[v0 + v], acc);
        }
        __syncwarp();  // every lane is done with the stage before it is refilled
        ++used;
        if (lane == 0 && ahead.s < n_steps) issue();
      }
      acc = ifd::warp_sum(acc);
      if (lane == 0) {
        const float v = acc + 0.f;
        st.y[o] = st.add ? st.y[o] + v : v;
      }
    }
  }
}

template <int PIECE>
int launch_chain(const IfdChainStep* steps, int n_steps, int stages, int max_k, unsigned* done,
           cudaStream_t s) {
  const size_t smem = kBarBytes + static_cast<size_t>(kChainWarps) * stages * PIECE +
                      static_cast<size_t>(max_k) * sizeof(bf16);
  if (stages < 1 || stages > 16 || max_k % 8 != 0 || smem > ifd::max_smem_optin())
    return static_cast<int>(cudaErrorInvalidValue);
  int dev = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(chain_kernel<PIECE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem));
  if (e != cudaSuccess) return static_cast<int>(e);
  ifd::launch_cooperative(chain_kernel<PIECE>, sms, kChainWarps * 32, smem, s, steps, n_steps,
                          stages, max_k, done);
  return ifd::launched();
}
}  // namespace

// steps: device array of n_steps; done: n_steps counters, zero (the caller clears them
// before each launch); max_k: the widest step's k (a multiple of 8); piece: 4096 or 8192.
extern "C" int ifd_chain(const IfdChainStep* steps, int n_steps, int stages, int piece,
                         int max_k, unsigned* done, void* stream) {
  const cudaStream_t s = ifd::as_stream(stream);
  if (n_steps <= 0) return 0;
  switch (piece) {
    case 4096: return launch_chain<4096>(steps, n_steps, stages, max_k, done, s);
    case 8192: return launch_chain<8192>(steps, n_steps, stages, max_k, done, s);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}
