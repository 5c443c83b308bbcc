// FlashInfer SM90 (FA3-style, wgmma) paged prefill, causal, HND, bf16, for one head_dim:
// plan + run. Included by fi_prefill_sm90_hd{64,128}.cu with IFD_FI_HD set.
#include <cutlass/numeric_types.h>

#include <flashinfer/attention/hopper/default_params.cuh>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>
#include <flashinfer/attention/mask.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <vector>

#include "fi_internal.h"

#ifndef IFD_FI_HD
#error "define IFD_FI_HD"
#endif

namespace ifd_fi {
namespace {
using namespace flashinfer;
using CBF = cutlass::bfloat16_t;
using PParams = BatchPrefillPagedParams<CBF, CBF, CBF, int32_t>;
}  // namespace

template <int HD_>
cudaError_t prefill_plan(const FiBufs& b, int32_t* qo_indptr_h, int32_t* kv_indptr_h,
                                    int32_t* kv_len_h, int n_seqs, int n_tokens, int n_heads,
                                    int n_kv_heads, int page_size, int64_t* info,
                                    cudaStream_t s) {
  constexpr uint32_t HD = HD_;
  PrefillPlanSM90Info pi;
  cudaError_t st = PrefillSM90Plan<int32_t>(
      b.float_ws, b.float_bytes, b.int_ws, b.pinned, b.int_bytes, pi, qo_indptr_h, kv_indptr_h,
      kv_len_h, static_cast<uint32_t>(n_tokens), static_cast<uint32_t>(n_seqs),
      static_cast<uint32_t>(n_heads), static_cast<uint32_t>(n_kv_heads), HD, HD,
      static_cast<uint32_t>(page_size), /*causal=*/true, /*enable_cuda_graph=*/false,
      /*sizeof_dtype_o=*/2, s);
  if (st != cudaSuccess) return st;
  if (pi.same_schedule_for_all_heads) {
    // Only the per-head persistent schedule is instantiated (it is what FlashInfer picks
    // up to ~4096 work tiles per head, i.e. ~500k query rows per pass).
    set_error("prefill: batch too large for the instantiated SM90 schedule");
    return cudaErrorNotSupported;
  }
  const std::vector<int64_t> v = pi.ToVector();
  for (size_t i = 0; i < v.size(); ++i) info[i] = v[i];
  return cudaSuccess;
}

template <int HD_>
cudaError_t prefill_run(const FiRun& r, cudaStream_t s) {
  constexpr uint32_t HD = HD_;
  PrefillPlanSM90Info pi;
  pi.FromVector(std::vector<int64_t>(r.info, r.info + 9));
  if (pi.same_schedule_for_all_heads) return cudaErrorNotSupported;

  PParams p;
  p.q_ptr = static_cast<CBF*>(const_cast<void*>(r.q));
  p.k_ptr = static_cast<CBF*>(const_cast<void*>(r.k));
  p.v_ptr = static_cast<CBF*>(const_cast<void*>(r.v));
  p.o_ptr = static_cast<CBF*>(r.o);
  p.lse_ptr = r.lse;
  // q/o [n_tokens, n_heads, HD]; K/V planes [pages, n_kv, page_size, HD] (HND).
  p.q_stride_n = static_cast<int64_t>(r.n_heads) * HD;
  p.q_stride_h = HD;
  p.o_stride_n = static_cast<int64_t>(r.n_heads) * HD;
  p.o_stride_h = HD;
  p.k_stride_h = static_cast<int64_t>(r.page_size) * HD;
  p.k_stride_n = HD;
  p.v_stride_h = static_cast<int64_t>(r.page_size) * HD;
  p.v_stride_n = HD;
  p.k_page_stride = static_cast<int64_t>(r.n_kv_heads) * r.page_size * HD;
  p.v_page_stride = p.k_page_stride;
  p.nnz_qo = r.n_tokens;
  p.num_qo_heads = r.n_heads;
  p.num_kv_heads = r.n_kv_heads;
  p.group_size = r.n_heads / r.n_kv_heads;
  p.page_size = r.page_size;
  p.window_left = -1;
  p.causal = true;
  p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.qo_tile_indices_offset);
  p.qo_indptr = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.qo_indptr_offset);
  p.kv_indptr = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.kv_indptr_offset);
  p.qo_lens = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.qo_len_offset);
  p.kv_lens = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.kv_len_offset);
  p.head_indices = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.head_indices_offset);
  p.work_indptr = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.work_indptr_offset);
  p.batch_indices = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.batch_indices_offset);
  p.kv_indices = r.kv_indices;
  p.additional_params.logits_soft_cap = 0.f;
  p.additional_params.sm_scale = r.sm_scale;
  p.additional_params.maybe_prefix_len_ptr = nullptr;
  p.additional_params.maybe_token_pos_in_items_ptr = nullptr;
  p.additional_params.token_pos_in_items_len = 0;
  p.additional_params.maybe_max_item_len_ptr = nullptr;

  return BatchPrefillWithPagedKVCacheDispatched<HD, HD, MaskMode::kCausal,
                                                /*LEFT_SLIDING_WINDOW=*/false,
                                                /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false,
                                                StandardAttention, PParams>(p, false, s);
}

}  // namespace ifd_fi

namespace ifd_fi {
template cudaError_t prefill_plan<IFD_FI_HD>(const FiBufs&, int32_t*, int32_t*, int32_t*, int,
                                             int, int, int, int, int64_t*, cudaStream_t);
template cudaError_t prefill_run<IFD_FI_HD>(const FiRun&, cudaStream_t);
}  // namespace ifd_fi
