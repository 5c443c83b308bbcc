// Internal interface between the C API (flashinfer_attention.cu, no FlashInfer headers)
// and the FlashInfer instantiations (fi_decode_hd*.cu, fi_prefill_sm90_hd*.cu,
// fi_ragged_sm90_hd*.cu, fi_prefill_fa2_hd128.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ifd_fi {

// FlashInfer's part of the workspace (the page-table region is carved off before it).
struct FiBufs {
  void* float_ws;
  size_t float_bytes;
  void* int_ws;   // device
  void* pinned;   // host, same offsets as int_ws
  size_t int_bytes;
};

// What a run needs; pointers are device pointers.
struct FiRun {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  float sm_scale;
  int n_seqs, n_tokens, n_heads, n_kv_heads, page_size;
  int kv_tokens;  // ragged prefill: rows of the contiguous K/V
  int32_t* kv_indptr;
  int32_t* kv_indices;
  int32_t* kv_last_page_len;
  int32_t* qo_indptr;  // [n_seqs + 1] query row offsets on the device (FA2 prefill)
  void* float_ws;  // FlashInfer region bases, as planned
  void* int_ws;
  const int64_t* info;  // FlashInfer plan info
};

// Decode (CUDA-core BatchDecode). info: DecodePlanInfo::ToVector() (10 values).
bool decode_group_supported(int group);
template <int HD>
cudaError_t decode_plan(const FiBufs& b, int32_t* kv_indptr_h, int n_seqs, int n_heads,
                        int n_kv_heads, int page_size, bool cuda_graph, int64_t* info,
                        int* split_kv, cudaStream_t s);
template <int HD>
cudaError_t decode_run(const FiRun& r, cudaStream_t s);

// SM90 paged prefill. info: PrefillPlanSM90Info::ToVector() (9 values).
template <int HD>
cudaError_t prefill_plan(const FiBufs& b, int32_t* qo_indptr_h, int32_t* kv_indptr_h,
                         int32_t* kv_len_h, int n_seqs, int n_tokens, int n_heads,
                         int n_kv_heads, int page_size, int64_t* info, cudaStream_t s);
template <int HD>
cudaError_t prefill_run(const FiRun& r, cudaStream_t s);

// SM90 ragged prefill over contiguous K/V (fi_ragged_sm90_impl.cuh). kv_tok_indptr_h: each
// sequence's first key row. info: PrefillPlanSM90Info::ToVector() (9 values).
template <int HD>
cudaError_t ragged_plan(const FiBufs& b, int32_t* qo_indptr_h, int32_t* kv_tok_indptr_h,
                        int32_t* kv_len_h, int n_seqs, int n_tokens, int n_heads, int n_kv_heads,
                        int64_t* info, cudaStream_t s);
template <int HD>
cudaError_t ragged_run(const FiRun& r, cudaStream_t s);

// FA2 paged prefill (fi_prefill_fa2_impl.cuh; head_dim 64, 128, 256): packs a KV head's query
// group into its query tiles and splits the keys to fill the SMs. kv_indptr_h: page
// offsets. split_pages: the keys of a piece (> 0; float_ws sized for the partials). info:
// PrefillPlanInfo::ToVector() (15 values).
template <int HD>
cudaError_t fa2_plan(const FiBufs& b, int32_t* qo_indptr_h, int32_t* kv_indptr_h, int n_seqs,
                     int n_tokens, int n_heads, int n_kv_heads, int page_size, int split_pages,
                     int64_t* info, int* split_kv, cudaStream_t s);
template <int HD>
cudaError_t fa2_run(const FiRun& r, cudaStream_t s);

// Sets the thread's error message (flashinfer_attention.cu).
void set_error(const char* msg);

}  // namespace ifd_fi
