// FlashInfer paged decode, head_dim 128 (see fi_decode_impl.cuh).
#define IFD_FI_HD 128
#include "fi_decode_impl.cuh"
