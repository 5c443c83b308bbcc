// FlashInfer FA2 paged prefill (mma.sync, HND, bf16, causal, no RoPE) for one head_dim: plan
// + run. Included by fi_prefill_fa2_hd*.cu with IFD_FI_HD set.
//
// Why beside the SM90 kernels: FlashInfer's SM90 scheduler makes one work item per (query
// head, 128-query tile) and never splits the keys, so a prompt chunk of a few dozen tokens
// over a long context is n_heads blocks, each streaming the whole context, while most SMs
// idle. This kernel's planner packs a KV head's query group into its query tile and splits
// the keys into pieces of the size the caller gives (`PrefillSplitQOKVIndptr`'s
// fixed_split_size: inferd sizes them from each chunk alone, split.rs), merging the pieces'
// partial results (`VariableLengthMergeStates`, partials in the float workspace).
#include "fi_sms.h"  // before FlashInfer's headers
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>

#include "fi_fa2_common.cuh"

#ifndef IFD_FI_HD
#error "define IFD_FI_HD"
#endif

namespace ifd_fi {
namespace {
using namespace flashinfer;
using BF = Fa2BF;
using FParams = BatchPrefillPagedParams<BF, BF, BF, int32_t>;
}  // namespace

template <int HD_>
cudaError_t fa2_plan(const FiBufs& b, int32_t* qo_indptr_h, int32_t* kv_indptr_h, int n_seqs,
                     int n_tokens, int n_heads, int n_kv_heads, int page_size, int split_pages,
                     int64_t* info, int* split_kv, cudaStream_t s) {
  constexpr uint32_t HD = HD_;
  PrefillPlanInfo pi;
  const cudaError_t st = PrefillPlan<int32_t>(
      b.float_ws, b.float_bytes, b.int_ws, b.pinned, b.int_bytes, pi, qo_indptr_h, kv_indptr_h,
      static_cast<uint32_t>(n_tokens), static_cast<uint32_t>(n_seqs),
      static_cast<uint32_t>(n_heads), static_cast<uint32_t>(n_kv_heads), HD, HD,
      static_cast<uint32_t>(page_size), /*enable_cuda_graph=*/false, sizeof(BF),
      /*window_left=*/-1, /*fixed_split_size=*/split_pages,
      /*disable_split_kv=*/false,
      /*num_colocated_ctas=*/0, /*uniform_q_len=*/0, s);
  if (st != cudaSuccess) return st;
  export_plan(pi, info, split_kv);
  return cudaSuccess;
}

template <int HD_>
cudaError_t fa2_run(const FiRun& r, cudaStream_t s) {
  constexpr uint32_t HD = HD_;
  const auto pi = import_plan<PrefillPlanInfo>(r);

  FParams p;
  set_fa2_run<HD>(p, r, pi);
  p.q_indptr = r.qo_indptr;
  p.group_size = uint_fastdiv(static_cast<uint32_t>(r.n_heads / r.n_kv_heads));
  p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.qo_tile_indices_offset);
  p.max_total_num_rows = static_cast<uint32_t>(pi.total_num_rows);
  p.total_num_rows = nullptr;  // planned without CUDA graphs: max_total_num_rows is exact

  if (pi.split_kv)
    p.merge_indptr = GetPtrFromBaseOffset<int32_t>(r.int_ws, pi.merge_indptr_offset);
  const auto tmp = fa2_partials<BF>(r, pi);
  cudaError_t st = cudaErrorNotSupported;
  DISPATCH_CTA_TILE_Q(pi.cta_tile_q, CTA_TILE_Q, {
    st = BatchPrefillWithPagedKVCacheDispatched<
        /*SAME_KV_STRIDES=*/true, CTA_TILE_Q, HD, HD, PosEncodingMode::kNone,
        /*USE_FP16_QK_REDUCTION=*/false, MaskMode::kCausal, Fa2Variant, FParams>(
        p, tmp.first, tmp.second, /*enable_pdl=*/false, s);
  });
  return st;
}

template cudaError_t fa2_plan<IFD_FI_HD>(const FiBufs&, int32_t*, int32_t*, int, int, int, int,
                                         int, int, int64_t*, int*, cudaStream_t);
template cudaError_t fa2_run<IFD_FI_HD>(const FiRun&, cudaStream_t);
}  // namespace ifd_fi
