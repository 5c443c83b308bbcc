// FlashInfer FA2 paged prefill, head_dim 256 (see fi_prefill_fa2_impl.cuh).
#define IFD_FI_HD 256
#include "fi_prefill_fa2_impl.cuh"
