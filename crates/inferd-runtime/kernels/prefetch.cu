// Warming the L2 cache with weights a later kernel of the pass reads, where the kernels
// between them leave the memory idle: at one decode row the attention reads a few MB of
// KV in about as many µs as the output projection takes to stream its 34 MB, and that
// projection's later blocks cannot start before the attention's blocks leave (an 8B
// model's; docs/gpu-notes.md, session 16). The lanes of a small grid issue bulk
// prefetches (each multiprocessor's copy engine fetches them; no lane waits for them),
// before or after waiting for the kernel before, as `after_wait` says; the kernel after
// this one waits for this one, so the pass's order of kernels is kept.
#include "common.cuh"

namespace {

constexpr unsigned kBlocks = 32, kThreads = 32;

__global__ void __launch_bounds__(kThreads)
    l2_prefetch_kernel(const char* __restrict__ p, size_t bytes, unsigned chunk, int after_wait) {
  ifd::pdl_trigger();
  const auto issue = [&] {
    const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x * chunk;
    for (size_t off = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * chunk;
         off < bytes; off += step) {
      const unsigned n = bytes - off < chunk ? static_cast<unsigned>(bytes - off) : chunk;
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n)
                   : "memory");
    }
  };
  if (!after_wait) issue();
  ifd::pdl_wait();
  if (after_wait) issue();
}
}  // namespace

extern "C" int ifd_l2_prefetch(const void* p, size_t bytes, int after_wait, void* stream) {
  // Bulk prefetches take 16-byte aligned addresses and multiples of 16 bytes.
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t start = (a + 15) & ~uintptr_t{15};
  if (bytes <= start - a) return 0;
  bytes = (bytes - (start - a)) & ~size_t{15};
  if (bytes == 0) return 0;
  // One or a few prefetches a lane, each a multiple of 4 KB.
  const size_t lanes = static_cast<size_t>(kBlocks) * kThreads;
  size_t chunk = (bytes + lanes - 1) / lanes;
  chunk = (chunk + 4095) / 4096 * 4096;
  if (chunk > (1u << 20)) chunk = 1u << 20;
  ifd::launch(l2_prefetch_kernel, kBlocks, kThreads, 0, ifd::as_stream(stream),
              reinterpret_cast<const char*>(start), bytes, static_cast<unsigned>(chunk),
              after_wait);
  return ifd::launched();
}
