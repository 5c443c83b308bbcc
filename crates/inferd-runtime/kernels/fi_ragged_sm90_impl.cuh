// FlashInfer SM90 (FA3-style, wgmma) ragged prefill, causal, bf16, for one head_dim: plan +
// run over contiguous K/V [kv_tokens, n_kv_heads, HD] (NHD), sequence i's keys from row
// kv_indptr[i] on, which its TMA loads in whole 128-key tiles (the paged kernel gathers
// 16-token pages with cp.async). The pass's K/V get there by ifd_kv_gather.
// Included by fi_ragged_sm90_hd{64,128,256}.cu with IFD_FI_HD set.
#include "fi_sm90_common.cuh"

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
  // Keys as pages of one token: the scheduler's kv_indptr is then in rows.
  return sm90_plan<HD_>(b, qo_indptr_h, kv_tok_indptr_h, kv_len_h, n_seqs, n_tokens, n_heads,
                        n_kv_heads, /*page_size=*/1, info, s);
}

template <int HD_>
cudaError_t ragged_run(const FiRun& r, cudaStream_t s) {
  constexpr uint32_t HD = HD_;
  RParams p;
  if (!set_run<HD>(p, r)) return cudaErrorNotSupported;
  // K/V [kv_tokens, n_kv, HD].
  p.k_stride_n = static_cast<int64_t>(r.n_kv_heads) * HD;
  p.k_stride_h = HD;
  p.v_stride_n = p.k_stride_n;
  p.v_stride_h = HD;
  p.nnz_kv = r.kv_tokens;

  return BatchPrefillWithRaggedKVCacheDispatched<HD, HD, MaskMode::kCausal,
                                                 /*LEFT_SLIDING_WINDOW=*/false,
                                                 /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false,
                                                 StandardAttention, RParams>(p, false, s);
}

template cudaError_t ragged_plan<IFD_FI_HD>(const FiBufs&, int32_t*, int32_t*, int32_t*, int, int,
                                            int, int, int64_t*, cudaStream_t);
template cudaError_t ragged_run<IFD_FI_HD>(const FiRun&, cudaStream_t);
}  // namespace ifd_fi
