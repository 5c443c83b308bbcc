// FlashInfer SM90 (FA3-style, wgmma) paged prefill, causal, HND, bf16, for one head_dim:
// plan + run. Included by fi_prefill_sm90_hd{64,128,256}.cu with IFD_FI_HD set.
#include "fi_sm90_common.cuh"

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
                         int n_kv_heads, int page_size, int64_t* info, cudaStream_t s) {
  return sm90_plan<HD_>(b, qo_indptr_h, kv_indptr_h, kv_len_h, n_seqs, n_tokens, n_heads,
                        n_kv_heads, page_size, info, s);
}

template <int HD_>
cudaError_t prefill_run(const FiRun& r, cudaStream_t s) {
  constexpr uint32_t HD = HD_;
  PParams p;
  if (!set_run<HD>(p, r)) return cudaErrorNotSupported;
  // K/V planes [pages, n_kv, page_size, HD] (HND).
  p.k_stride_h = static_cast<int64_t>(r.page_size) * HD;
  p.k_stride_n = HD;
  p.v_stride_h = static_cast<int64_t>(r.page_size) * HD;
  p.v_stride_n = HD;
  p.k_page_stride = static_cast<int64_t>(r.n_kv_heads) * r.page_size * HD;
  p.v_page_stride = p.k_page_stride;
  p.page_size = r.page_size;
  p.kv_indices = r.kv_indices;

  return BatchPrefillWithPagedKVCacheDispatched<HD, HD, MaskMode::kCausal,
                                                /*LEFT_SLIDING_WINDOW=*/false,
                                                /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false,
                                                StandardAttention, PParams>(p, false, s);
}

template cudaError_t prefill_plan<IFD_FI_HD>(const FiBufs&, int32_t*, int32_t*, int32_t*, int,
                                             int, int, int, int, int64_t*, cudaStream_t);
template cudaError_t prefill_run<IFD_FI_HD>(const FiRun&, cudaStream_t);
}  // namespace ifd_fi
