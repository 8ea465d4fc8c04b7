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
