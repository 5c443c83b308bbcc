// Host stand-in for <cuda_fp8.h>, the calls kernels/kv8.cuh makes: e4m3 codes and values.
// The conversion is a search for the nearest of the 127 finite magnitudes (ties to the
// even code), not the bit arithmetic of crate::kv::fp8, so each checks the other.
#pragma once
#include <cmath>
#include <cstdint>

#include "common.cuh"  // float2

typedef uint8_t __nv_fp8_storage_t;
enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE };
enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };
struct __half_raw {
  float f;  // emulation: the value itself (every e4m3 value is exact in f16 and f32)
};
struct __half {
  float f;
  __half(__half_raw r) : f(r.f) {}
};
inline float __half2float(__half h) { return h.f; }
typedef uint16_t __nv_fp8x2_storage_t;
struct __half2_raw {
  float x, y;
};
struct __half2 {
  float x, y;
  __half2(__half2_raw r) : x(r.x), y(r.y) {}
};
inline float2 __half22float2(__half2 h) { return {h.x, h.y}; }

inline float emu_e4m3_value(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  float mag = e == 15 && m == 7 ? NAN
              : e == 0          ? std::ldexp(static_cast<float>(m), -9)
                                : std::ldexp(1.f + m / 8.f, e - 7);
  return c & 0x80 ? -mag : mag;
}
inline __half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t c, __nv_fp8_interpretation_t) {
  return {emu_e4m3_value(c)};
}
inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t c, __nv_fp8_interpretation_t) {
  return {emu_e4m3_value(static_cast<uint8_t>(c & 0xff)), emu_e4m3_value(static_cast<uint8_t>(c >> 8))};
}
inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t,
                                                __nv_fp8_interpretation_t) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  double bd = INFINITY;
  for (int c = 0; c <= 0x7e; ++c) {
    const double d = std::fabs(a - emu_e4m3_value(static_cast<uint8_t>(c)));
    if (d < bd || (d == bd && c % 2 == 0)) {
      bd = d;
      best = c;
    }
  }
  return static_cast<uint8_t>(sign | best);
}
