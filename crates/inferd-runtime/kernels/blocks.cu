// Moving whole KV blocks between the pool and a contiguous block image in one launch:
// the image of blocks ids[0..n] is, block after block, every layer's K then V piece of
// `pb` bytes (the order of a block's export image, crate::kv::KvLayout::block_bytes).
// planes: device array [n_layers * 2] of plane bases (layer l's K at 2l, V at 2l + 1).
#include "common.cuh"

namespace {
// One block of threads per (block, layer, plane) piece; 16-byte moves when pieces are
// 16-byte multiples, else bytes.
template <bool GATHER>
__global__ void move_kernel(void* const* __restrict__ planes, int n_layers,
                            const int32_t* __restrict__ ids, size_t pb, char* __restrict__ image) {
  ifd::pdl_begin();
  const size_t piece = blockIdx.x;  // (i * n_layers + l) * 2 + p
  const size_t i = piece / (2 * n_layers);
  const int lp = static_cast<int>(piece % (2 * n_layers));
  char* plane = static_cast<char*>(planes[lp]) + static_cast<size_t>(ids[i]) * pb;
  char* img = image + piece * pb;
  const char* src = GATHER ? plane : img;
  char* dst = GATHER ? img : plane;
  const size_t vecs = pb % 16 == 0 ? pb / 16 : 0;  // pieces stay 16-byte aligned then
  const uint4* s4 = reinterpret_cast<const uint4*>(src);
  uint4* d4 = reinterpret_cast<uint4*>(dst);
  for (size_t k = threadIdx.x; k < vecs; k += blockDim.x) d4[k] = s4[k];
  for (size_t k = vecs * 16 + threadIdx.x; k < pb; k += blockDim.x) dst[k] = src[k];
}

int launch(bool gather, void* const* planes, int n_layers, const int32_t* ids, int n,
           size_t pb, void* image, void* stream) {
  if (n == 0) return 0;
  const unsigned pieces = static_cast<unsigned>(static_cast<size_t>(n) * n_layers * 2);
  if (gather)
    ifd::launch(move_kernel<true>, pieces, 256, 0, ifd::as_stream(stream), planes, n_layers, ids,
                pb, static_cast<char*>(image));
  else
    ifd::launch(move_kernel<false>, pieces, 256, 0, ifd::as_stream(stream), planes, n_layers, ids,
                pb, static_cast<char*>(image));
  return ifd::launched();
}
}  // namespace

extern "C" {
int ifd_gather_blocks(void* const* planes, int n_layers, const int32_t* ids, int n, size_t pb,
                      void* image, void* stream) {
  return launch(true, planes, n_layers, ids, n, pb, image, stream);
}

int ifd_scatter_blocks(void* const* planes, int n_layers, const int32_t* ids, int n, size_t pb,
                       const void* image, void* stream) {
  return launch(false, planes, n_layers, ids, n, pb, const_cast<void*>(image), stream);
}
}  // extern "C"
