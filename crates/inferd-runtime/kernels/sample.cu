// Greedy draws on the device: the argmax of chosen logits rows, with the host sampler's
// rules (NaN counts as -inf, +inf as FLT_MAX, the lowest id wins a tie, a row of -inf
// picks id 0), so only token ids leave the device.
#include <cfloat>

#include "common.cuh"

namespace {
constexpr int THREADS = 512;

__device__ __forceinline__ float clean(float x) {
  return isnan(x) ? -INFINITY : (x == INFINITY ? FLT_MAX : x);
}

// Keeps (v, i) with the larger value, the smaller id on a tie.
__device__ __forceinline__ void better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

__global__ void argmax_rows_kernel(const float* __restrict__ logits, int vocab,
                                   const int32_t* __restrict__ rows, int32_t* __restrict__ out) {
  ifd::pdl_begin();
  const float* row = logits + static_cast<size_t>(rows[blockIdx.x]) * vocab;
  float v = -INFINITY;
  int id = 0x7fffffff;
  for (int t = threadIdx.x; t < vocab; t += THREADS) better(v, id, clean(row[t]), t);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    better(v, id, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, id, o));
  __shared__ float sv[THREADS / 32];
  __shared__ int si[THREADS / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = id;
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < THREADS / 32 ? sv[lane] : -INFINITY;
    id = lane < THREADS / 32 ? si[lane] : 0x7fffffff;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      better(v, id, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, id, o));
    // A row of -inf: every id ties at -inf and the lowest, 0, wins.
    if (lane == 0) out[blockIdx.x] = id == 0x7fffffff ? 0 : id;
  }
}
}  // namespace

extern "C" int ifd_argmax_rows(const float* logits, int vocab, const int32_t* rows, int n,
                               int32_t* out, void* stream) {
  if (n == 0) return 0;
  ifd::launch(argmax_rows_kernel, n, THREADS, 0, ifd::as_stream(stream), logits, vocab, rows, out);
  return ifd::launched();
}
