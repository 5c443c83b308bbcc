// Moving whole KV blocks between the pool and a contiguous block image in one launch:
// the image of blocks ids[0..n] is, block after block, every layer's pieces in plane order
// (K values, then for 8-bit KV K scales, V values, V scales: the order of a block's export
// image, crate::kv::KvLayout::block_bytes), piece p of pieces.bytes[p] bytes.
// planes: device array [n_layers * pieces.n] of plane bases (layer l's piece p at
// l * pieces.n + p).
#include "common.cuh"

namespace {
// One block of threads per (block, layer, plane) piece; 16-byte moves when pieces are
// 16-byte multiples, else bytes.
template <bool GATHER>
__global__ void move_kernel(void* const* __restrict__ planes, int n_layers,
                            const int32_t* __restrict__ ids, IfdPieces pieces,
                            char* __restrict__ image) {
  ifd::pdl_begin();
  const int per = pieces.n;
  const size_t piece = blockIdx.x;  // (i * n_layers + l) * per + p
  const size_t i = piece / (static_cast<size_t>(per) * n_layers);
  const int lp = static_cast<int>(piece % (static_cast<size_t>(per) * n_layers));
  const int p = lp % per;
  size_t layer_bytes = 0, at = 0;
  for (int q = 0; q < per; ++q) {
    if (q == p) at = layer_bytes;
    layer_bytes += pieces.bytes[q];
  }
  const size_t pb = pieces.bytes[p];
  char* plane = static_cast<char*>(planes[lp]) + static_cast<size_t>(ids[i]) * pb;
  char* img = image + (i * n_layers + lp / per) * layer_bytes + at;
  const char* src = GATHER ? plane : img;
  char* dst = GATHER ? img : plane;
  // 16-byte moves when every piece is a multiple of 16 (pieces then stay aligned).
  bool vec = true;
  for (int q = 0; q < per; ++q) vec = vec && pieces.bytes[q] % 16 == 0;
  const size_t vecs = vec ? pb / 16 : 0;
  const uint4* s4 = reinterpret_cast<const uint4*>(src);
  uint4* d4 = reinterpret_cast<uint4*>(dst);
  for (size_t k = threadIdx.x; k < vecs; k += blockDim.x) d4[k] = s4[k];
  for (size_t k = vecs * 16 + threadIdx.x; k < pb; k += blockDim.x) dst[k] = src[k];
}

int launch(bool gather, void* const* planes, int n_layers, IfdPieces pieces, const int32_t* ids,
           int n, void* image, void* stream) {
  if (n == 0) return 0;
  if (pieces.n < 1 || pieces.n > 4) return static_cast<int>(cudaErrorInvalidValue);
  const unsigned count = static_cast<unsigned>(static_cast<size_t>(n) * n_layers * pieces.n);
  if (gather)
    ifd::launch(move_kernel<true>, count, 256, 0, ifd::as_stream(stream), planes, n_layers, ids,
                pieces, static_cast<char*>(image));
  else
    ifd::launch(move_kernel<false>, count, 256, 0, ifd::as_stream(stream), planes, n_layers, ids,
                pieces, static_cast<char*>(image));
  return ifd::launched();
}
}  // namespace

extern "C" {
int ifd_gather_blocks(void* const* planes, int n_layers, IfdPieces pieces, const int32_t* ids,
                      int n, void* image, void* stream) {
  return launch(true, planes, n_layers, pieces, ids, n, image, stream);
}

int ifd_scatter_blocks(void* const* planes, int n_layers, IfdPieces pieces, const int32_t* ids,
                       int n, const void* image, void* stream) {
  return launch(false, planes, n_layers, pieces, ids, n, const_cast<void*>(image), stream);
}
}  // extern "C"
