// FlashInfer FA2 paged prefill, head_dim 128 (see fi_prefill_fa2_impl.cuh).
#define IFD_FI_HD 128
#include "fi_prefill_fa2_impl.cuh"
