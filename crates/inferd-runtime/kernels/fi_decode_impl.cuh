// FlashInfer BatchDecode (paged, HND, bf16, no RoPE, causal by construction) for one
// head_dim: plan + run. Included by fi_decode_hd{64,128}.cu with IFD_FI_HD set.
#include "fi_sms.h"  // before FlashInfer's headers
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>

#include "fi_fa2_common.cuh"

#ifndef IFD_FI_HD
#error "define IFD_FI_HD"
#endif

namespace ifd_fi {
namespace {
using namespace flashinfer;
using BF = Fa2BF;
using DParams = BatchDecodeParams<BF, BF, BF, int32_t>;
using DVariant = Fa2Variant;
constexpr PosEncodingMode kPos = PosEncodingMode::kNone;
}  // namespace

template <int HD_>
cudaError_t decode_plan(const FiBufs& b, int32_t* kv_indptr_h, int n_seqs,
                                   int n_heads, int n_kv_heads, int page_size, bool cuda_graph,
                                   int64_t* info, int* split_kv, cudaStream_t s) {
  constexpr uint32_t HD = HD_;
  DecodePlanInfo pi;
  cudaError_t st = cudaErrorNotSupported;
  DISPATCH_GQA_GROUP_SIZE(n_heads / n_kv_heads, GROUP_SIZE, {
    auto estimate =
        BatchDecodeWithPagedKVCacheWorkEstimationDispatched<GROUP_SIZE, HD, kPos, DVariant,
                                                            DParams>;
    st = DecodePlan<HD, kPos, DVariant, DParams>(
        b.float_ws, b.float_bytes, b.int_ws, b.pinned, b.int_bytes, pi, kv_indptr_h,
        static_cast<uint32_t>(n_seqs), static_cast<uint32_t>(n_heads),
        static_cast<uint32_t>(page_size), cuda_graph, s, estimate);
  });
  if (st != cudaSuccess) return st;
  export_plan(pi, info, split_kv);
  return cudaSuccess;
}

template <int HD_>
cudaError_t decode_run(const FiRun& r, cudaStream_t s) {
  constexpr uint32_t HD = HD_;
  const auto pi = import_plan<DecodePlanInfo>(r);

  DParams p;
  set_fa2_run<HD>(p, r, pi);
  p.q_rope_offset = nullptr;
  p.maybe_alibi_slopes = nullptr;
  p.block_valid_mask = nullptr;

  if (pi.split_kv && pi.enable_cuda_graph)
    p.block_valid_mask = GetPtrFromBaseOffset<bool>(r.int_ws, pi.block_valid_mask_offset);
  const auto tmp = fa2_partials<BF>(r, pi);
  return BatchDecodeWithPagedKVCacheDispatched<HD, kPos, DVariant, DParams>(
      p, tmp.first, tmp.second, /*enable_pdl=*/false, s);
}

}  // namespace ifd_fi

namespace ifd_fi {
template cudaError_t decode_plan<IFD_FI_HD>(const FiBufs&, int32_t*, int, int, int, int, bool,
                                            int64_t*, int*, cudaStream_t);
template cudaError_t decode_run<IFD_FI_HD>(const FiRun&, cudaStream_t);
}  // namespace ifd_fi
