// FlashInfer SM90 ragged causal prefill, head_dim 256 (see fi_ragged_sm90_impl.cuh).
#define IFD_FI_HD 256
#include "fi_ragged_sm90_impl.cuh"
