// A chain of matrix-vector products in one persistent kernel: y_s = W_s · x_s for steps
// s = 0, 1, …, where x_s (f32, rounded to bf16 on its way into shared memory) is written
// by earlier steps, so step s may start only once every block is done with step s - 1.
//
// Why one kernel: a decode step of one row is a chain of products, each bound by reading
// its weight once. Launched one kernel a product, a multiprocessor's stream of weight bytes
// stops at every boundary: the next kernel's blocks can issue their first loads early
// (programmatic dependent launch) only where the last blocks of the one before have left
// room, and only as many bytes as their registers hold. Here each warp streams rows of
// every step through a ring of bulk copies into shared memory, and that stream does not
// depend on the data: while a block waits for the step before to finish everywhere, its
// ring keeps filling with the next step's weights, so the memory never waits for the
// chain, only the arithmetic does.
//
// Shape: one block a multiprocessor (gridDim.x the SM count, every block resident: the
// launch is cooperative), kChainWarps warps. A warp claims a step's rows one at a time
// (a counter a step) as its ring has room for their first piece, so a multiprocessor that
// streams faster takes more rows and the step ends within about a row of the same time
// everywhere; it takes a row's bytes in pieces of PIECE bytes (a row of k bf16 is
// ceil(2k / PIECE) pieces), `stages` pieces in flight. A lane takes the same elements of a
// row in the same order as gemv.cu's wave kernel, so the two give the same bits.
//
// Between steps: a grid-wide barrier (a counter a step; a block adds one when its rows are
// written and waits for gridDim.x), then x_{s+1} is read through L2 (never L1, which
// another multiprocessor's writes do not reach).
#include "common.cuh"

namespace {
using ifd::bf16;

constexpr int kChainWarps = 8;
constexpr int kMaxStages = 16;
// The ring's barriers [kChainWarps][kMaxStages] u64, then what each stage holds
// [kChainWarps][kMaxStages] {step, row}.
constexpr size_t kBarBytes = kChainWarps * kMaxStages * (8 + 8);
constexpr int kXLoads = 12;  // 16-byte loads of x a thread has in flight

__device__ __forceinline__ int pieces_of(int k, int piece) {
  return static_cast<int>((static_cast<size_t>(k) * sizeof(bf16) + piece - 1) / piece);
}

// counters: [n_steps] blocks done with each step, then [n_steps] rows claimed of each.
template <int PIECE>
__global__ void __launch_bounds__(kChainWarps * 32, 1)
    chain_kernel(const IfdChainStep* __restrict__ steps, int n_steps, int stages, int max_k,
                 unsigned* __restrict__ counters, int wait) {
  extern __shared__ float smem[];
  // bars, metas (above); ring: [kChainWarps][stages][PIECE] bytes of W; xs: bf16 [max_k]
  unsigned char* const base = reinterpret_cast<unsigned char*>(smem);
  uint64_t* const bars = reinterpret_cast<uint64_t*>(base);
  int2* const metas = reinterpret_cast<int2*>(base + kChainWarps * kMaxStages * 8);
  unsigned char* const ring = base + kBarBytes;
  bf16* const xs = reinterpret_cast<bf16*>(ring + static_cast<size_t>(kChainWarps) * stages * PIECE);
  unsigned* const done = counters;
  unsigned* const claimed = counters + n_steps;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned char* const mine = ring + static_cast<size_t>(warp) * stages * PIECE;
  uint64_t* const full = bars + warp * kMaxStages;
  int2* const meta = metas + warp * kMaxStages;

  // Lane 0 issues the warp's pieces `stages` ahead of the arithmetic, across steps: piece
  // `ij` of row `ir` (claimed) of step `is`; is == n_steps once every step's rows are taken.
  int is = 0, ir = 0, ij = 0, ipieces = 0, issued = 0;
  uint64_t policy = 0;
  const auto issue = [&]() {  // lane 0: the next piece, if any is left
    if (ij == ipieces) {  // a new row: claim one, or move on to the next step
      for (;; ++is) {
        if (is == n_steps) return;
        ir = static_cast<int>(atomicAdd(claimed + is, 1u));
        if (ir < steps[is].out) break;
      }
      ij = 0;
      ipieces = pieces_of(steps[is].k, PIECE);
    }
    const IfdChainStep& st = steps[is];
    const size_t row_bytes = static_cast<size_t>(st.k) * sizeof(bf16);
    const size_t at = static_cast<size_t>(ir) * row_bytes + static_cast<size_t>(ij) * PIECE;
    const size_t left = row_bytes - static_cast<size_t>(ij) * PIECE;
    const uint32_t bytes = static_cast<uint32_t>(left < PIECE ? left : PIECE);
    const int stage = issued % stages;
    meta[stage] = make_int2(is, ir);
    ifd::bulk_load(mine + static_cast<size_t>(stage) * PIECE,
                   reinterpret_cast<const unsigned char*>(st.w) + at, bytes, &full[stage], policy);
    ++issued;
    ++ij;
  };
  // The weights do not depend on the kernel before: the first pieces are on their way
  // before the wait for it.
  if (lane == 0) {
    for (int s = 0; s < stages; ++s) ifd::bar_init(&full[s], 1);
    ifd::bar_init_fence();
    policy = ifd::evict_first();
    for (int s = 0; s < stages; ++s) issue();
  }
  ifd::pdl_begin();

  int used = 0;  // pieces this warp has taken from its ring
  for (int s = 0; s < n_steps; ++s) {
    const IfdChainStep& st = steps[s];
    if (s > 0 && wait) {
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
    __syncthreads();  // (also: the ring's barriers and first metas in place before any read)
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
    const int kv = st.k >> 3;  // 16-byte vectors in a row
    const int pieces = pieces_of(st.k, PIECE);
    const uint4* const xv = reinterpret_cast<const uint4*>(xs);
    float acc = 0.f;
    // This warp's rows of step s: the pieces in its ring up to the first of a later step.
    for (int j = 0;;) {
      if (used == __shfl_sync(0xffffffffu, issued, 0)) break;  // every step's rows are taken
      const int stage = used % stages;
      const int2 m = meta[stage];
      if (m.x != s) break;
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
      if (lane == 0) issue();
      __syncwarp();  // the new piece's meta written before any lane reads it
      if (++j == pieces) {
        acc = ifd::warp_sum(acc);
        if (lane == 0) {
          const float v = acc + 0.f;
          st.y[m.y] = st.add ? st.y[m.y] + v : v;
        }
        acc = 0.f;
        j = 0;
      }
    }
  }
}

template <int PIECE>
int launch_chain(const IfdChainStep* steps, int n_steps, int stages, int max_k,
                 unsigned* counters, int wait, cudaStream_t s) {
  const size_t smem = kBarBytes + static_cast<size_t>(kChainWarps) * stages * PIECE +
                      static_cast<size_t>(max_k) * sizeof(bf16);
  if (stages < 1 || stages > kMaxStages || max_k % 8 != 0 || smem > ifd::max_smem_optin())
    return static_cast<int>(cudaErrorInvalidValue);
  int dev = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(chain_kernel<PIECE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem));
  if (e != cudaSuccess) return static_cast<int>(e);
  ifd::launch_cooperative(chain_kernel<PIECE>, sms, kChainWarps * 32, smem, s, steps, n_steps,
                          stages, max_k, counters, wait);
  return ifd::launched();
}
}  // namespace

// steps: device array of n_steps; counters: 2 n_steps words, zero (the caller clears them
// before each launch); max_k: the widest step's k (a multiple of 8); piece: 4096 or 8192.
extern "C" int ifd_chain(const IfdChainStep* steps, int n_steps, int stages, int piece,
                         int max_k, unsigned* counters, int wait, void* stream) {
  const cudaStream_t s = ifd::as_stream(stream);
  if (n_steps <= 0) return 0;
  switch (piece) {
    case 4096: return launch_chain<4096>(steps, n_steps, stages, max_k, counters, wait, s);
    case 8192: return launch_chain<8192>(steps, n_steps, stages, max_k, counters, wait, s);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}
