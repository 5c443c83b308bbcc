// The pool's block tables on the device (crate::backend::cuda::tables): a pass's table
// edits arrive as (entry, block) pairs in its metadata and are written in one launch,
// stream-ordered before the pass's kernels read the table.
#include "common.cuh"

namespace {
// pairs: [n, 2] (entry index into table, block id); entries of one launch are distinct.
__global__ void scatter_kernel(int32_t* __restrict__ table, const int32_t* __restrict__ pairs,
                               int n) {
  ifd::pdl_begin();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) table[pairs[2 * i]] = pairs[2 * i + 1];
}
}  // namespace

extern "C" {
int ifd_table_scatter(int32_t* table, const int32_t* pairs, int n, void* stream) {
  if (n == 0) return 0;
  if (n < 0) return static_cast<int>(cudaErrorInvalidValue);
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  ifd::launch(scatter_kernel, blocks, 256, 0, ifd::as_stream(stream), table, pairs, n);
  return ifd::launched();
}
}  // extern "C"
