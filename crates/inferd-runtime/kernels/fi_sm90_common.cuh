// What FlashInfer's SM90 prefill units share (fi_prefill_sm90_impl.cuh: paged,
// fi_ragged_sm90_impl.cuh: contiguous K/V, fi_prefill_bench.cu): the plan, and the run
// parameters every causal pass of ours sets alike.
#pragma once
#include "fi_sms.h"  // before FlashInfer's headers
#include <cutlass/numeric_types.h>

#include <flashinfer/attention/hopper/default_params.cuh>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>
#include <flashinfer/attention/mask.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <vector>

#include "fi_internal.h"

namespace ifd_fi {

// FlashInfer's SM90 schedule of a causal pass (kv_indptr_h in pages of page_size; ragged
// K/V: tokens, page_size 1) -> info (PrefillPlanSM90Info::ToVector(), 9 values). Only the
// per-head persistent schedule is instantiated (what FlashInfer picks up to ~4096 work
// tiles per head, i.e. ~500k query rows per pass); the other is refused.
template <uint32_t HD>
cudaError_t sm90_plan(const FiBufs& b, int32_t* qo_indptr_h, int32_t* kv_indptr_h,
                      int32_t* kv_len_h, int n_seqs, int n_tokens, int n_heads, int n_kv_heads,
                      int page_size, int64_t* info, cudaStream_t s) {
  flashinfer::PrefillPlanSM90Info pi;
  cudaError_t st = flashinfer::PrefillSM90Plan<int32_t>(
      b.float_ws, b.float_bytes, b.int_ws, b.pinned, b.int_bytes, pi, qo_indptr_h, kv_indptr_h,
      kv_len_h, static_cast<uint32_t>(n_tokens), static_cast<uint32_t>(n_seqs),
      static_cast<uint32_t>(n_heads), static_cast<uint32_t>(n_kv_heads), HD, HD,
      static_cast<uint32_t>(page_size), /*causal=*/true, /*enable_cuda_graph=*/false,
      /*sizeof_dtype_o=*/2, s);
  if (st != cudaSuccess) return st;
  if (pi.same_schedule_for_all_heads) {
    set_error("prefill: batch too large for the instantiated SM90 schedule");
    return cudaErrorNotSupported;
  }
  const std::vector<int64_t> v = pi.ToVector();
  for (size_t i = 0; i < v.size(); ++i) info[i] = v[i];
  return cudaSuccess;
}

// A run's schedule (the plan's arrays in int_ws) and the rest every pass of ours sets alike:
// causal, no window, no soft cap, q/o [n_tokens, n_heads, HD].
template <uint32_t HD, typename P>
void set_common(P& p, const flashinfer::PrefillPlanSM90Info& pi, void* int_ws, float sm_scale,
                int n_tokens, int n_heads, int n_kv_heads) {
  using flashinfer::GetPtrFromBaseOffset;
  p.q_stride_n = static_cast<int64_t>(n_heads) * HD;
  p.q_stride_h = HD;
  p.o_stride_n = static_cast<int64_t>(n_heads) * HD;
  p.o_stride_h = HD;
  p.nnz_qo = n_tokens;
  p.num_qo_heads = n_heads;
  p.num_kv_heads = n_kv_heads;
  p.group_size = n_heads / n_kv_heads;
  p.window_left = -1;
  p.causal = true;
  p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(int_ws, pi.qo_tile_indices_offset);
  p.qo_indptr = GetPtrFromBaseOffset<int32_t>(int_ws, pi.qo_indptr_offset);
  p.kv_indptr = GetPtrFromBaseOffset<int32_t>(int_ws, pi.kv_indptr_offset);
  p.qo_lens = GetPtrFromBaseOffset<int32_t>(int_ws, pi.qo_len_offset);
  p.kv_lens = GetPtrFromBaseOffset<int32_t>(int_ws, pi.kv_len_offset);
  p.head_indices = GetPtrFromBaseOffset<int32_t>(int_ws, pi.head_indices_offset);
  p.work_indptr = GetPtrFromBaseOffset<int32_t>(int_ws, pi.work_indptr_offset);
  p.batch_indices = GetPtrFromBaseOffset<int32_t>(int_ws, pi.batch_indices_offset);
  p.additional_params.logits_soft_cap = 0.f;
  p.additional_params.sm_scale = sm_scale;
  p.additional_params.maybe_prefix_len_ptr = nullptr;
  p.additional_params.maybe_token_pos_in_items_ptr = nullptr;
  p.additional_params.token_pos_in_items_len = 0;
  p.additional_params.maybe_max_item_len_ptr = nullptr;
}

// A run's parameters but the K/V layout's: the schedule back from the plan's info, q, K, V,
// out and lse from r, and set_common's. False for a schedule not instantiated.
template <uint32_t HD, typename P>
bool set_run(P& p, const FiRun& r) {
  using CBF = cutlass::bfloat16_t;
  flashinfer::PrefillPlanSM90Info pi;
  pi.FromVector(std::vector<int64_t>(r.info, r.info + 9));
  if (pi.same_schedule_for_all_heads) return false;
  p.q_ptr = static_cast<CBF*>(const_cast<void*>(r.q));
  p.k_ptr = static_cast<CBF*>(const_cast<void*>(r.k));
  p.v_ptr = static_cast<CBF*>(const_cast<void*>(r.v));
  p.o_ptr = static_cast<CBF*>(r.o);
  p.lse_ptr = r.lse;
  set_common<HD>(p, pi, r.int_ws, r.sm_scale, r.n_tokens, r.n_heads, r.n_kv_heads);
  return true;
}

}  // namespace ifd_fi
