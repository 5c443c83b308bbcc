// FlashInfer SM90 paged causal prefill, head_dim 128 (see fi_prefill_sm90_impl.cuh).
#define IFD_FI_HD 128
#include "fi_prefill_sm90_impl.cuh"
