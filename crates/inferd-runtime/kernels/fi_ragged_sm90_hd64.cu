// FlashInfer SM90 ragged causal prefill, head_dim 64 (see fi_ragged_sm90_impl.cuh).
#define IFD_FI_HD 64
#include "fi_ragged_sm90_impl.cuh"
