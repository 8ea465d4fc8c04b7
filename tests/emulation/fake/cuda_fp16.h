// Emulation stand-in (host only): fp16 as _Float16.
#pragma once
#include "cuda_runtime.h"
struct __half {
  _Float16 v;
  __half() = default;
  __half(int i) : v(static_cast<_Float16>(i)) {}
  explicit __half(float f) : v(static_cast<_Float16>(f)) {}
};
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half(float f) { return __half(f); }
inline float __half2float(__half h) { return static_cast<float>(h.v); }

// half2: two fp16 lanes; the arithmetic rounds each lane to fp16 once, as the GPU's.
struct alignas(4) __half2 {
  __half x, y;
};
inline __half2 __float2half2_rn(float f) { return {__half(f), __half(f)}; }
inline __half2 __floats2half2_rn(float lo, float hi) { return {__half(lo), __half(hi)}; }
inline __half __hfma_lane(__half a, __half b, __half c) {  // fused: one rounding, of the exact a*b + c
  __half out;
  out.v = static_cast<_Float16>(static_cast<double>(a.v) * static_cast<double>(b.v) + static_cast<double>(c.v));
  return out;
}
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return {__hfma_lane(a.x, b.x, c.x), __hfma_lane(a.y, b.y, c.y)}; }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
