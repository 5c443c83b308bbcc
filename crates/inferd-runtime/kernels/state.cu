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

// Grid (pairs, n_layers * 2): piece lp of slot pairs[2i] over slot pairs[2i + 1]. The
// pairs of one launch are independent (no slot written by one is read or written by
// another: the host cuts the list into such waves).
__global__ void copy_kernel(float* const* __restrict__ planes, size_t conv, size_t delta,
                            const int32_t* __restrict__ pairs) {
  ifd::pdl_begin();
  const int i = blockIdx.x, lp = blockIdx.y;
  const int src = pairs[2 * i], dst = pairs[2 * i + 1];
  if (src == dst) return;
  const size_t n = piece_elems(lp, conv, delta);
  const float* s = planes[lp] + static_cast<size_t>(src) * n;
  float* d = planes[lp] + static_cast<size_t>(dst) * n;
  for (size_t k = threadIdx.x; k < n; k += blockDim.x) d[k] = s[k];
}

// Grid (slots, n_layers * 2): piece lp of slot ids[i] to (GATHER) or from its image.
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
  for (size_t k = threadIdx.x; k < n; k += blockDim.x) {
    if (GATHER)
      img[k] = plane[k];
    else
      plane[k] = img[k];
  }
}
}  // namespace

extern "C" {

int ifd_copy_state_slots(float* const* planes, int n_layers, size_t conv_elems,
                         size_t delta_elems, const int32_t* pairs, int n, void* stream) {
  if (n == 0 || n_layers == 0) return 0;
  ifd::launch(copy_kernel, dim3(n, 2 * n_layers), 256, 0, ifd::as_stream(stream), planes,
              conv_elems, delta_elems, pairs);
  return ifd::launched();
}

int ifd_gather_state_slots(float* const* planes, int n_layers, size_t conv_elems,
                           size_t delta_elems, const int32_t* ids, int n, float* image,
                           void* stream) {
  if (n == 0 || n_layers == 0) return 0;
  ifd::launch(move_kernel<true>, dim3(n, 2 * n_layers), 256, 0, ifd::as_stream(stream), planes,
              n_layers, conv_elems, delta_elems, ids, image);
  return ifd::launched();
}

int ifd_scatter_state_slots(float* const* planes, int n_layers, size_t conv_elems,
                            size_t delta_elems, const int32_t* ids, int n, const float* image,
                            void* stream) {
  if (n == 0 || n_layers == 0) return 0;
  ifd::launch(move_kernel<false>, dim3(n, 2 * n_layers), 256, 0, ifd::as_stream(stream), planes,
              n_layers, conv_elems, delta_elems, ids, const_cast<float*>(image));
  return ifd::launched();
}

}  // extern "C"
