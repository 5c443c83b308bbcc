// One layer's K/V of a pass's prompt chunks, gathered from the paged pool into one
// contiguous bf16 array per plane, sequence after sequence ([tokens, n_kv, head_dim]):
// the layout FlashInfer's ragged SM90 prefill loads by TMA in whole 128-key tiles, where
// its paged kernel gathers 16-token pages by cp.async (13-21% slower at the 8B head shape,
// `cuda_check fibench`). 8-bit pools are dequantized on the way (as dequant_pages does).
#include "common.cuh"
#include "kv8.cuh"

namespace {
using ifd::bf16;

// Sequence of page p: the i with page_indptr[i] <= p < page_indptr[i + 1].
__device__ __forceinline__ int seq_of_page(const int32_t* __restrict__ page_indptr, int n_seqs,
                                           int p) {
  int lo = 0, hi = n_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (page_indptr[mid] <= p) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// 8 consecutive values of a stored row as bf16 (16 bytes), from element e of row `row`.
template <int KV>
struct Src8;
template <>
struct Src8<IFD_KV_BF16> {
  __device__ __forceinline__ static uint4 load(const void* plane, const float*, size_t row,
                                               int hd, int e) {
    return *reinterpret_cast<const uint4*>(static_cast<const bf16*>(plane) + row * hd + e);
  }
};
template <int KV>
struct Src8 {
  __device__ __forceinline__ static uint4 load(const void* plane, const float* scale,
                                               size_t row, int hd, int e) {
    const uint2 c = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(plane) +
                                                    row * hd + e);
    const float sc = scale[row];
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t word = j < 2 ? c.x : c.y;
      const int sh = 16 * (j % 2);
      const float a = ifd::Code8<KV>::decode(static_cast<uint8_t>(word >> sh));
      const float b = ifd::Code8<KV>::decode(static_cast<uint8_t>(word >> (sh + 8)));
      w[j] = ifd::pack_bf16(a * sc, b * sc);
    }
    return uint4{w[0], w[1], w[2], w[3]};
  }
};

// Block (p, plane): page p of the pass (its sequence's page j = p - page_indptr[seq]) of
// K (plane 0) or V (plane 1). Each thread moves 8 values at a time; a page's rows past
// its sequence's kv_len are not copied. The block of a sequence's last page also zeroes
// the rows from its kv_len to the next sequence's start.
template <int KV>
__global__ void kv_gather_kernel(IfdPaged kv, const int32_t* __restrict__ page_indptr,
                                 const int32_t* __restrict__ pages,
                                 const int32_t* __restrict__ last_page_len,
                                 const int32_t* __restrict__ tok_indptr, int n_seqs,
                                 bf16* __restrict__ k_out, bf16* __restrict__ v_out) {
  ifd::pdl_begin();
  const int p = blockIdx.x;
  const bool is_v = blockIdx.y == 1;
  const int s = seq_of_page(page_indptr, n_seqs, p);
  const int j = p - page_indptr[s];
  const bool last = p == page_indptr[s + 1] - 1;
  const int bs = kv.block_size, n_kv = kv.n_kv_heads, hd = kv.head_dim;
  const int first = tok_indptr[s] + j * bs;       // contiguous row of the page's slot 0
  const int valid = last ? last_page_len[s] : bs;  // slots of the page in use
  const size_t page_rows = static_cast<size_t>(n_kv) * bs;
  const size_t base = static_cast<size_t>(pages[p]) * page_rows;  // stored row of (h 0, slot 0)
  const void* plane = is_v ? kv.v : kv.k;
  const float* scale = is_v ? kv.v_scale : kv.k_scale;
  bf16* out = is_v ? v_out : k_out;
  const int vecs_per_row = hd / 8;
  const int n = static_cast<int>(page_rows) * vecs_per_row;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int r = i / vecs_per_row;  // h * bs + slot
    const int e = (i % vecs_per_row) * 8;
    const int h = r / bs, t = r % bs;
    if (t >= valid) continue;
    const uint4 x = Src8<KV>::load(plane, scale, base + r, hd, e);
    *reinterpret_cast<uint4*>(out + (static_cast<size_t>(first + t) * n_kv + h) * hd + e) = x;
  }
  if (!last) return;
  // Rows first + valid .. tok_indptr[s + 1]: whole rows, contiguous.
  const size_t row_vecs = static_cast<size_t>(n_kv) * vecs_per_row;
  const size_t from = static_cast<size_t>(first + valid) * row_vecs;
  const size_t to = static_cast<size_t>(tok_indptr[s + 1]) * row_vecs;
  uint4* o = reinterpret_cast<uint4*>(out);
  for (size_t i = from + threadIdx.x; i < to; i += blockDim.x) o[i] = uint4{0, 0, 0, 0};
}
}  // namespace

int ifd_kv_gather(IfdPaged kv, const int32_t* page_indptr, const int32_t* pages,
                  const int32_t* last_page_len, const int32_t* tok_indptr, int n_seqs,
                  int n_pages, void* k_out, void* v_out, void* stream) {
  if (n_pages == 0) return 0;
  if (n_seqs <= 0 || kv.head_dim % 8 != 0) return static_cast<int>(cudaErrorInvalidValue);
  cudaStream_t s = ifd::as_stream(stream);
  const dim3 grid(static_cast<unsigned>(n_pages), 2);
  bf16* kd = static_cast<bf16*>(k_out);
  bf16* vd = static_cast<bf16*>(v_out);
  switch (kv.dtype) {
    case IFD_KV_BF16:
      ifd::launch(kv_gather_kernel<IFD_KV_BF16>, grid, 256, 0, s, kv, page_indptr, pages,
                  last_page_len, tok_indptr, n_seqs, kd, vd);
      break;
    case IFD_KV_Q8:
      ifd::launch(kv_gather_kernel<IFD_KV_Q8>, grid, 256, 0, s, kv, page_indptr, pages,
                  last_page_len, tok_indptr, n_seqs, kd, vd);
      break;
    case IFD_KV_FP8:
      ifd::launch(kv_gather_kernel<IFD_KV_FP8>, grid, 256, 0, s, kv, page_indptr, pages,
                  last_page_len, tok_indptr, n_seqs, kd, vd);
      break;
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
  return ifd::launched();
}
