// FlashInfer SM90 paged causal prefill, head_dim 64 (see fi_prefill_sm90_impl.cuh).
#define IFD_FI_HD 64
#include "fi_prefill_sm90_impl.cuh"
