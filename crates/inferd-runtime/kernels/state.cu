// The recurrent-state slots of hybrid models (crate::kv::StateLayout): per linear layer a
// conv plane f32 [slots, conv_elems] and a delta plane f32 [slots, delta_elems]; planes is
// a device array [n_layers * 2] of their bases (layer l's conv at 2l, delta at 2l + 1).
// A slot's image is, layer after layer, its conv then its delta state (the export order):
// slot_elems = n_layers * (conv_elems + delta_elems) floats.
#include "common.cuh"

namespace {
// Elements of piece lp (2l: conv, 2l + 1: delta) and its offset inside a slot's image.
__device__ __forceinline__ size_t piece_elems(int lp, size_t conv, size_t delta) {
  return (lp & 1) ? delta : conv;
}
__device__ __forceinline__ size_t piece_offset(int lp, size_t conv, size_t delta) {
  return static_cast<size_t>(lp >> 1) * (conv + delta) + ((lp & 1) ? conv : 0);
}

// Blocks sharing one piece (grid z): a delta piece is megabytes (Qwen3.5-9B: 2 MB a
// layer), too much for one block's loads in flight.
constexpr int SPLIT = 16;

// n floats from s to d by the SPLIT blocks of this piece, 16 bytes a load when both ends
// are 16-byte aligned and n a multiple of 4.
__device__ __forceinline__ void copy_piece(float* __restrict__ d, const float* __restrict__ s,
                                           size_t n) {
  const size_t t = static_cast<size_t>(blockIdx.z) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.z) * blockDim.x;
  const bool vec = (n & 3) == 0 && (reinterpret_cast<uintptr_t>(d) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(s) & 15) == 0;
  if (vec) {
    float4* d4 = reinterpret_cast<float4*>(d);
    const float4* s4 = reinterpret_cast<const float4*>(s);
    for (size_t k = t; k < n / 4; k += stride) d4[k] = s4[k];
  } else {
    for (size_t k = t; k < n; k += stride) d[k] = s[k];
  }
}

// Grid (pairs, n_layers * 2, SPLIT): piece lp of slot pairs[2i] over slot pairs[2i + 1].
// The pairs of one launch are independent (no slot written by one is read or written by
// another: the host cuts the list into such waves).
__global__ void copy_kernel(float* const* __restrict__ planes, size_t conv, size_t delta,
                            const int32_t* __restrict__ pairs) {
  ifd::pdl_begin();
  const int i = blockIdx.x, lp = blockIdx.y;
  const int src = pairs[2 * i], dst = pairs[2 * i + 1];
  if (src == dst) return;
  const size_t n = piece_elems(lp, conv, delta);
  copy_piece(planes[lp] + static_cast<size_t>(dst) * n, planes[lp] + static_cast<size_t>(src) * n,
             n);
}

// Grid (slots, n_layers * 2, SPLIT): piece lp of slot ids[i] to (GATHER) or from its image.
template <bool GATHER>
__global__ void move_kernel(float* const* __restrict__ planes, int n_layers, size_t conv,
                            size_t delta, const int32_t* __restrict__ ids,
                            float* __restrict__ image) {
  ifd::pdl_begin();
  const int i = blockIdx.x, lp = blockIdx.y;
  const size_t n = piece_elems(lp, conv, delta);
  float* plane = planes[lp] + static_cast<size_t>(ids[i]) * n;
  float* img = image + static_cast<size_t>(i) * n_layers * (conv + delta) +
               piece_offset(lp, conv, delta);
  if (GATHER)
    copy_piece(img, plane, n);
  else
    copy_piece(plane, img, n);
}
}  // namespace

extern "C" {

int ifd_copy_state_slots(float* const* planes, int n_layers, size_t conv_elems,
                         size_t delta_elems, const int32_t* pairs, int n, void* stream) {
  if (n == 0 || n_layers == 0) return 0;
  ifd::launch(copy_kernel, dim3(n, 2 * n_layers, SPLIT), 256, 0, ifd::as_stream(stream), planes,
              conv_elems, delta_elems, pairs);
  return ifd::launched();
}

int ifd_gather_state_slots(float* const* planes, int n_layers, size_t conv_elems,
                           size_t delta_elems, const int32_t* ids, int n, float* image,
                           void* stream) {
  if (n == 0 || n_layers == 0) return 0;
  ifd::launch(move_kernel<true>, dim3(n, 2 * n_layers, SPLIT), 256, 0, ifd::as_stream(stream), planes,
              n_layers, conv_elems, delta_elems, ids, image);
  return ifd::launched();
}

int ifd_scatter_state_slots(float* const* planes, int n_layers, size_t conv_elems,
                            size_t delta_elems, const int32_t* ids, int n, const float* image,
                            void* stream) {
  if (n == 0 || n_layers == 0) return 0;
  ifd::launch(move_kernel<false>, dim3(n, 2 * n_layers, SPLIT), 256, 0, ifd::as_stream(stream), planes,
              n_layers, conv_elems, delta_elems, ids, const_cast<float*>(image));
  return ifd::launched();
}

}  // extern "C"
