// FlashInfer SM90 ragged causal prefill, head_dim 128 (see fi_ragged_sm90_impl.cuh).
#define IFD_FI_HD 128
#include "fi_ragged_sm90_impl.cuh"
