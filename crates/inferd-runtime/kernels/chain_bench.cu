// Measurement only (`cuda_check chain`): the products of a one-row decode step run as
// chain.cu's persistent kernel against gemv.cu's kernel one launch a product (in a CUDA
// graph, as a decode step replays them), on the same random weights, and a device copy for
// the bandwidth at hand. See inferd.h (ifd_chain_bench).
#include <cmath>
#include <vector>

#include "common.cuh"

namespace {
using ifd::bf16;

// Uniform in [-a, a) from the index's hash.
__device__ __forceinline__ float hashed(size_t i, unsigned seed, float a) {
  unsigned long long h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<unsigned long long>(seed) << 32);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return (static_cast<float>(h >> 40) / static_cast<float>(1ull << 24) * 2.f - 1.f) * a;
}

__global__ void fill_bf16(bf16* p, size_t n, unsigned seed, float a) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(hashed(i, seed, a));
}
__global__ void fill_f32(float* p, size_t n, unsigned seed, float a) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = hashed(i, seed, a);
}
// x f32 [k] -> bf16 [k], as chain.cu rounds its x.
__global__ void round_x(const float* x, bf16* out, int k) {
  ifd::pdl_begin();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < k) out[i] = __float2bfloat16(x[i]);
}
__global__ void max_diff(const float* a, const float* b, int n, float* out) {
  float m = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, fabsf(a[i] - b[i]));
  m = ifd::warp_max(m);
  if ((threadIdx.x & 31) == 0) atomicMax(reinterpret_cast<int*>(out), __float_as_int(m));
}

struct Bench {
  cudaStream_t s = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  std::vector<void*> owned;
  ~Bench() {
    for (void* p : owned) cudaFree(p);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (s) cudaStreamDestroy(s);
  }
  template <typename T>
  T* alloc(size_t n) {
    void* p = nullptr;
    if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) return nullptr;
    owned.push_back(p);
    return static_cast<T*>(p);
  }
  // ms a run of f(), the mean of `iters` after one warm-up.
  template <typename F>
  float time(int iters, F f) {
    f();
    cudaEventRecord(e0, s);
    for (int i = 0; i < iters; ++i) f();
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, e0, e1);
    return ms / iters;
  }
};

#define IFD_TRY(x)                                  \
  do {                                              \
    const cudaError_t e_ = (x);                     \
    if (e_ != cudaSuccess) return static_cast<int>(e_); \
  } while (0)
}  // namespace

extern "C" int ifd_chain_bench(int hidden, int qkv_out, int gate_up, int layers, int iters,
                               int n_cfg, const int* stages, const int* pieces, float* res) {
  Bench b;
  IFD_TRY(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking));
  IFD_TRY(cudaEventCreate(&b.e0));
  IFD_TRY(cudaEventCreate(&b.e1));
  // A layer's products: (k, out).
  const int shapes[4][2] = {{hidden, qkv_out}, {hidden, hidden}, {hidden, gate_up}, {gate_up / 2, hidden}};
  const int n = 4 * layers;
  int max_k = 0, max_out = 0;
  for (auto& sh : shapes) {
    max_k = std::max(max_k, sh[0]);
    max_out = std::max(max_out, sh[1]);
  }
  // y of each product kind (a step reads the y of the step before), the chain's and the
  // wave kernel's apart; x0 the first step's input.
  float* x0 = b.alloc<float>(max_k);
  bf16* xb = b.alloc<bf16>(max_k);
  float* ys[2][4];
  for (auto& side : ys)
    for (int t = 0; t < 4; ++t) side[t] = b.alloc<float>(shapes[t][1]);
  unsigned* counters = b.alloc<unsigned>(2 * n);
  float* diff = b.alloc<float>(1);
  IfdChainStep* dsteps = b.alloc<IfdChainStep>(n);
  if (!x0 || !xb || !counters || !diff || !dsteps) return static_cast<int>(cudaErrorMemoryAllocation);
  fill_f32<<<64, 256, 0, b.s>>>(x0, max_k, 7, 1.f);
  std::vector<IfdChainStep> steps(n);
  for (int l = 0; l < layers; ++l)
    for (int t = 0; t < 4; ++t) {
      const int k = shapes[t][0], out = shapes[t][1];
      bf16* w = b.alloc<bf16>(static_cast<size_t>(k) * out);
      if (!w) return static_cast<int>(cudaErrorMemoryAllocation);
      // variance 1/k: y keeps x's scale down the chain
      fill_bf16<<<1024, 256, 0, b.s>>>(w, static_cast<size_t>(k) * out, 100 + 4 * l + t,
                                       std::sqrt(3.f / k));
      const int i = 4 * l + t;
      steps[i] = IfdChainStep{w, i == 0 ? x0 : ys[0][(t + 3) % 4], ys[0][t], k, out, 0, 0};
    }
  IFD_TRY(cudaMemcpyAsync(dsteps, steps.data(), n * sizeof(IfdChainStep), cudaMemcpyHostToDevice, b.s));
  IFD_TRY(cudaStreamSynchronize(b.s));

  // gemv.cu one launch a product, captured as a decode step's graph is.
  const auto wave = [&](bool rounded, int side) {
    for (int i = 0; i < n; ++i) {
      const IfdChainStep& st = steps[i];
      if (rounded) {
        const float* x = i == 0 ? x0 : ys[side][(i + 3) % 4];
        ifd::launch(round_x, ifd::blocks_for(st.k, 256), 256, 0, b.s, x, xb, st.k);
      }
      ifd_gemv(xb, st.w, nullptr, ys[side][i % 4], 1, st.k, st.out, 16, 0, b.s);
    }
  };
  const auto graph_of = [&](auto f, cudaGraphExec_t* exec) -> cudaError_t {
    cudaGraph_t g = nullptr;
    cudaError_t e = cudaStreamBeginCapture(b.s, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) return e;
    f();
    e = cudaStreamEndCapture(b.s, &g);
    if (e != cudaSuccess) return e;
    e = cudaGraphInstantiate(exec, g, 0);
    cudaGraphDestroy(g);
    return e;
  };
  cudaGraphExec_t plain = nullptr, rounded = nullptr;
  IFD_TRY(graph_of([&] { wave(false, 1); }, &plain));
  IFD_TRY(graph_of([&] { wave(true, 1); }, &rounded));
  res[0] = b.time(iters, [&] { cudaGraphLaunch(plain, b.s); });
  res[1] = b.time(iters, [&] { cudaGraphLaunch(rounded, b.s); });
  cudaGraphExecDestroy(plain);
  IFD_TRY(cudaGetLastError());

  // The bandwidth at hand: a device copy of 1 GiB, bytes read and written.
  {
    const size_t bytes = size_t{1} << 30;
    unsigned char* a = b.alloc<unsigned char>(bytes);
    unsigned char* c = b.alloc<unsigned char>(bytes);
    if (!a || !c) return static_cast<int>(cudaErrorMemoryAllocation);
    const float ms = b.time(iters, [&] { cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice, b.s); });
    res[2] = static_cast<float>(2.0 * bytes / (ms * 1e-3) / 1e12);
  }

  // The chain, each configuration; its outputs against the wave kernel's (the rounded
  // graph's, replayed last above: the same inputs).
  for (int c = 0; c < n_cfg; ++c) {
    const auto run = [&] {
      cudaMemsetAsync(counters, 0, 2 * n * sizeof(unsigned), b.s);
      ifd_chain(dsteps, n, stages[c], pieces[c], max_k, counters, 1, b.s);
    };
    run();
    IFD_TRY(cudaStreamSynchronize(b.s));
    IFD_TRY(cudaGetLastError());
    if (c == 0) {
      cudaGraphLaunch(rounded, b.s);
      cudaMemsetAsync(diff, 0, sizeof(float), b.s);
      for (int t = 0; t < 4; ++t) max_diff<<<1, 1024, 0, b.s>>>(ys[0][t], ys[1][t], shapes[t][1], diff);
      IFD_TRY(cudaMemcpyAsync(&res[3], diff, sizeof(float), cudaMemcpyDeviceToHost, b.s));
    }
    res[5 + c] = b.time(iters, run);
    if (c == 0)
      res[4] = b.time(iters, [&] {
        cudaMemsetAsync(counters, 0, 2 * n * sizeof(unsigned), b.s);
        ifd_chain(dsteps, n, stages[c], pieces[c], max_k, counters, 0, b.s);
      });
    IFD_TRY(cudaGetLastError());
  }
  cudaGraphExecDestroy(rounded);
  IFD_TRY(cudaStreamSynchronize(b.s));
  return 0;
}
