// FlashInfer paged decode, head_dim 256 (see fi_decode_impl.cuh).
#define IFD_FI_HD 256
#include "fi_decode_impl.cuh"
