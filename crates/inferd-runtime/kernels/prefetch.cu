// A weight staged in L2 ahead of the product that reads it. One row's decode attention
// takes about 15 µs a layer at 4k (a chain of latencies, not of bytes: its 16.8 MB of KV
// read at about 1 TB/s), and the product after it, the O projection, reads 34 MB (the 8B)
// from DRAM only once the attention is done. Queued right before the attention, this
// kernel waits for the kernel before it (like every kernel of ours, so the chain of
// programmatic dependent launches keeps its order) and then asks the memory system to
// bring the weight into L2 with bulk prefetches (`cp.async.bulk.prefetch.L2`), which take
// no registers, no shared memory and no completion: the product then reads it from L2.
//
// What it stages is bounded by L2: the weight plus what the attention streams through L2
// (the row's KV of the layer, `per_position` bytes a position, read from the pass's
// positions on the device, so a replayed graph bounds it by each pass's context) must fit
// in `budget` bytes, else less of the weight is staged, or none. It computes nothing and
// writes nothing: a prefetch changes no result.
#include "common.cuh"

namespace {

constexpr int kThreads = 32;
constexpr int kBlocks = 16;
constexpr unsigned long long kChunk = 16384;  // bytes a prefetch instruction asks for

// w: the weight's bytes (16-byte aligned); pos: the pass's positions (row 0's is the
// one-row pass's newest) or null; the bytes staged: min(bytes, budget - (pos[0] + 1) *
// per_position), rounded down to 16.
__global__ void __launch_bounds__(kThreads)
    l2_prefetch_kernel(const char* __restrict__ w, unsigned long long bytes,
                       const int32_t* __restrict__ pos, unsigned long long per_position,
                       unsigned long long budget) {
  ifd::pdl_begin();
  unsigned long long n = bytes;
  if (pos != nullptr) {
    const unsigned long long kv = static_cast<unsigned long long>(max(pos[0], 0) + 1) * per_position;
    n = kv < budget ? min(n, budget - kv) : 0;
  }
  n &= ~15ull;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * kThreads * kChunk;
  for (unsigned long long at = (static_cast<unsigned long long>(blockIdx.x) * kThreads + threadIdx.x) * kChunk;
       at < n; at += stride)
    ifd::prefetch_l2(w + at, static_cast<unsigned>(min(kChunk, n - at)));
}

}  // namespace

extern "C" {

// L2's size on the current device, in bytes (0 when it cannot be read).
size_t ifd_l2_bytes() {
  int dev = 0, bytes = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<size_t>(bytes);
}

int ifd_l2_prefetch(const void* w, size_t bytes, const int32_t* pos, size_t per_position,
                    size_t budget, void* stream) {
  if (bytes == 0) return 0;
  if (reinterpret_cast<uintptr_t>(w) % 16 != 0) return static_cast<int>(cudaErrorInvalidValue);
  ifd::launch(l2_prefetch_kernel, kBlocks, kThreads, 0, ifd::as_stream(stream),
              static_cast<const char*>(w), static_cast<unsigned long long>(bytes), pos,
              static_cast<unsigned long long>(per_position),
              static_cast<unsigned long long>(budget));
  return ifd::launched();
}

}  // extern "C"
