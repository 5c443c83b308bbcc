// FlashInfer SM90 (FA3-style, wgmma) ragged prefill, causal, bf16, for one head_dim: plan +
// run over contiguous K/V [kv_tokens, n_kv_heads, HD] (NHD), sequence i's keys at rows
// kv_indptr[i] .. kv_indptr[i + 1], which its TMA loads in whole 128-key tiles (the paged
// kernel gathers 16-token pages with cp.async). The pass's K/V get there by ifd_kv_gather.
// Included by fi_ragged_sm90_hd{64,128,256}.cu with IFD_FI_HD set.
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
using RParams = BatchPrefillRaggedParams<CBF, CBF, CBF, int32_t>;
}  // namespace

template <int HD_>
cudaError_t ragged_plan(const FiBufs& b, int32_t* qo_indptr_h, int32_t* kv_tok_indptr_h,
                        int32_t* kv_len_h, int n_seqs, int n_tokens, int n_heads, int n_kv_heads,
                        int64_t* info, cudaStream_t s) {
  constexpr uint32_t HD = HD_;
  PrefillPlanSM90Info pi;
  // Keys as pages of one token: the scheduler's kv_indptr is then in tokens.
  cudaError_t st = PrefillSM90Plan<int32_t>(
      b.float_ws, b.float_bytes, b.int_ws, b.pinned, b.int_bytes, pi, qo_indptr_h,
      kv_tok_indptr_h, kv_len_h, static_cast<uint32_t>(n_tokens), static_cast<uint32_t>(n_seqs),
      static_cast<uint32_t>(n_heads), static_cast<uint32_t>(n_kv_heads), HD, HD,
      /*page_size=*/1u, /*causal=*/true, /*enable_cuda_graph=*/false, /*sizeof_dtype_o=*/2, s);
  if (st != cudaSuccess) return st;
  if (pi.same_schedule_for_all_heads) {
    set_error("ragged prefill: batch too large for the instantiated SM90 schedule");
    return cudaErrorNotSupported;
  }
  const std::vector<int64_t> v = pi.ToVector();
  for (size_t i = 0; i < v.size(); ++i) info[i] = v[i];
  return cudaSuccess;
}

template <int HD_>
cudaError_t ragged_run(const FiRun& r, cudaStream_t s) {
  constexpr uint32_t HD = HD_;
  PrefillPlanSM90Info pi;
  pi.FromVector(std::vector<int64_t>(r.info, r.info + 9));
  if (pi.same_schedule_for_all_heads) return cudaErrorNotSupported;

  RParams p;
  p.q_ptr = static_cast<CBF*>(const_cast<void*>(r.q));
  p.k_ptr = static_cast<CBF*>(const_cast<void*>(r.k));
  p.v_ptr = static_cast<CBF*>(const_cast<void*>(r.v));
  p.o_ptr = static_cast<CBF*>(r.o);
  p.lse_ptr = r.lse;
  // q/o [n_tokens, n_heads, HD]; K/V [kv_tokens, n_kv, HD].
  p.q_stride_n = static_cast<int64_t>(r.n_heads) * HD;
  p.q_stride_h = HD;
  p.o_stride_n = static_cast<int64_t>(r.n_heads) * HD;
  p.o_stride_h = HD;
  p.k_stride_n = static_cast<int64_t>(r.n_kv_heads) * HD;
  p.k_stride_h = HD;
  p.v_stride_n = p.k_stride_n;
  p.v_stride_h = HD;
  p.nnz_qo = r.n_tokens;
  p.nnz_kv = r.kv_tokens;
  p.num_qo_heads = r.n_heads;
  p.num_kv_heads = r.n_kv_heads;
  p.group_size = r.n_heads / r.n_kv_heads;
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
  p.additional_params.logits_soft_cap = 0.f;
  p.additional_params.sm_scale = r.sm_scale;
  p.additional_params.maybe_prefix_len_ptr = nullptr;
  p.additional_params.maybe_token_pos_in_items_ptr = nullptr;
  p.additional_params.token_pos_in_items_len = 0;
  p.additional_params.maybe_max_item_len_ptr = nullptr;

  return BatchPrefillWithRaggedKVCacheDispatched<HD, HD, MaskMode::kCausal,
                                                 /*LEFT_SLIDING_WINDOW=*/false,
                                                 /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false,
                                                 StandardAttention, RParams>(p, false, s);
}

template cudaError_t ragged_plan<IFD_FI_HD>(const FiBufs&, int32_t*, int32_t*, int32_t*, int, int,
                                            int, int, int64_t*, cudaStream_t);
template cudaError_t ragged_run<IFD_FI_HD>(const FiRun&, cudaStream_t);
}  // namespace ifd_fi
