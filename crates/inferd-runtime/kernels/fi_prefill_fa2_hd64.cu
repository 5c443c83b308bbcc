// FlashInfer FA2 paged prefill, head_dim 64 (see fi_prefill_fa2_impl.cuh).
#define IFD_FI_HD 64
#include "fi_prefill_fa2_impl.cuh"
