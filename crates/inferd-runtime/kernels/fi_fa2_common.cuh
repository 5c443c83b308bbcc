// The run parameters FlashInfer's FA2-family kernels share (BatchDecode, fi_decode_impl.cuh;
// the paged prefill, fi_prefill_fa2_impl.cuh): q, out, the paged K/V over inferd's pages
// (HND), the softmax scale, and the schedule the plan wrote into the int workspace.
#pragma once
#include "fi_sms.h"  // before FlashInfer's headers
#include <cuda_bf16.h>

#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/page.cuh>
#include <utility>
#include <vector>

#include "fi_internal.h"

namespace ifd_fi {

using Fa2BF = nv_bfloat16;
// Plain causal softmax attention: no custom mask, sliding window, soft cap or ALiBi.
using Fa2Variant = flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/false,
                                                /*soft_cap=*/false, /*alibi=*/false>;

// A plan's info as the C API keeps it (`IfdFiPlan::fi_info`), and whether it splits the keys.
template <typename Info>
void export_plan(const Info& pi, int64_t* info, int* split_kv) {
  const std::vector<int64_t> v = pi.ToVector();
  for (size_t i = 0; i < v.size(); ++i) info[i] = v[i];
  *split_kv = pi.split_kv ? 1 : 0;
}

// The plan's info back from `IfdFiPlan::fi_info` (as many values as `Info` exports).
template <typename Info>
Info import_plan(const FiRun& r) {
  Info pi;
  pi.FromVector(std::vector<int64_t>(r.info, r.info + Info().ToVector().size()));
  return pi;
}

// A split plan's partial outputs and their log-sum-exps in the float workspace, merged by
// the kernel's second pass (none for an unsplit plan).
template <typename BF, typename Info>
std::pair<BF*, float*> fa2_partials(const FiRun& r, const Info& pi) {
  if (!pi.split_kv) return {nullptr, nullptr};
  return {flashinfer::GetPtrFromBaseOffset<BF>(r.float_ws, pi.v_offset),
          flashinfer::GetPtrFromBaseOffset<float>(r.float_ws, pi.s_offset)};
}

// `Info`: the plan's DecodePlanInfo or PrefillPlanInfo (the same offsets by name).
template <uint32_t HD, typename Params, typename Info>
void set_fa2_run(Params& p, const FiRun& r, const Info& pi) {
  using BF = typename Params::DTypeQ;
  using flashinfer::GetPtrFromBaseOffset;
  p.q = static_cast<BF*>(const_cast<void*>(r.q));
  p.paged_kv = flashinfer::paged_kv_t<BF, int32_t>(
      static_cast<uint32_t>(r.n_kv_heads), static_cast<uint32_t>(r.page_size), HD,
      static_cast<uint32_t>(r.n_seqs), flashinfer::QKVLayout::kHND,
      static_cast<BF*>(const_cast<void*>(r.k)), static_cast<BF*>(const_cast<void*>(r.v)),
      r.kv_indices, r.kv_indptr, r.kv_last_page_len);
  p.o = static_cast<BF*>(r.o);
  p.lse = r.lse;
  p.num_qo_heads = static_cast<uint32_t>(r.n_heads);
  p.q_stride_n = static_cast<int32_t>(r.n_heads * HD);
  p.q_stride_h = static_cast<int32_t>(HD);
  p.window_left = -1;
  p.logits_soft_cap = 0.f;
  p.sm_scale = r.sm_scale;
  p.rope_rcp_scale = 1.f;
  p.rope_rcp_theta = 1.f;
  p.request_indices = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.request_indices_offset);
  p.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.kv_tile_indices_offset);
  p.o_indptr = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.o_indptr_offset);
  p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.kv_chunk_size_ptr_offset);
  p.padded_batch_size = static_cast<uint32_t>(pi.padded_batch_size);
  p.partition_kv = false;
}

}  // namespace ifd_fi
