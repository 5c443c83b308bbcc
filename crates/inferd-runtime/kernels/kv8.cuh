// The 8-bit KV row formats on the device (crate::kv::q8 and crate::kv::fp8 on the host):
// a row's codes are its values divided by one f32 scale, max|row| / 127 (Q8, i8 rounded
// half away from zero) or max|row| / 448 (Fp8, e4m3 rounded to nearest even, saturating).
// The arithmetic is the host's, operation for operation, so both write the same bytes.
#pragma once
#include <cuda_fp8.h>

#include "common.cuh"

namespace ifd {

// Code traits: KV = IFD_KV_Q8 or IFD_KV_FP8.
template <int KV>
struct Code8;

template <>
struct Code8<IFD_KV_Q8> {
  static constexpr float kMax = 127.f;
  __device__ __forceinline__ static uint8_t encode(float v) {
    if (isnan(v)) return 0;  // the host's `NaN as i8`
    const float r = fminf(fmaxf(roundf(v), -127.f), 127.f);
    return static_cast<uint8_t>(static_cast<int8_t>(r));
  }
  __device__ __forceinline__ static float decode(uint8_t c) {
    return static_cast<float>(static_cast<int8_t>(c));
  }
  // Two codes at once (c[0], c[1]) -> out[0], out[1].
  __device__ __forceinline__ static void decode2(const uint8_t* c, float* out) {
    out[0] = decode(c[0]);
    out[1] = decode(c[1]);
  }
};

template <>
struct Code8<IFD_KV_FP8> {
  static constexpr float kMax = 448.f;
  __device__ __forceinline__ static uint8_t encode(float v) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
  }
  __device__ __forceinline__ static float decode(uint8_t c) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3);
    return __half2float(__half(h));
  }
  // Two codes at once (one conversion instruction): c[0], c[1] -> out[0], out[1].
  __device__ __forceinline__ static void decode2(const uint8_t* c, float* out) {
    const __nv_fp8x2_storage_t pair =
        static_cast<__nv_fp8x2_storage_t>(c[0] | static_cast<unsigned>(c[1]) << 8);
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
    const float2 f = __half22float2(__half2(h));
    out[0] = f.x;
    out[1] = f.y;
  }
};

// The scale of a row whose largest magnitude is amax (0 or non-finite: codes are zeros).
template <int KV>
__device__ __forceinline__ float row_scale(float amax) {
  return __fdiv_rn(amax, Code8<KV>::kMax);
}

template <int KV>
__device__ __forceinline__ uint8_t quantize(float x, float scale) {
  if (scale == 0.f || !isfinite(scale)) return 0;
  return Code8<KV>::encode(__fdiv_rn(x, scale));
}

}  // namespace ifd
