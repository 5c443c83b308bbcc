// FlashInfer paged decode, head_dim 64 (see fi_decode_impl.cuh).
#define IFD_FI_HD 64
#include "fi_decode_impl.cuh"
