// FlashInfer SM90 paged causal prefill, head_dim 256 (see fi_prefill_sm90_impl.cuh).
#define IFD_FI_HD 256
#include "fi_prefill_sm90_impl.cuh"
