// What the kernels' check programs (depthwise_check.cu, grouped_mma_check.cu)
// and the host emulation's mains (tests/emulation: grouped, stem, direct) share: the CUDA error check, the element types' host conversions and names,
// and random operands rounded to the element type (their float values kept
// for the float64 references).
#pragma once

#include "kernels/direct_conv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CUDA_CHECK(expr)                                                                         \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

template <typename T> float to_float(T v);
template <> inline float to_float<__half>(__half v) { return __half2float(v); }
template <> inline float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> inline float to_float<float>(float v) { return v; }
template <> inline float to_float<double>(double v) { return static_cast<float>(v); }
template <typename T> T from_float(float v);
template <> inline __half from_float<__half>(float v) { return __float2half(v); }
template <> inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> inline float from_float<float>(float v) { return v; }
template <> inline double from_float<double>(float v) { return v; }
template <typename T> torch_cudnn_algo::kernels::DirectDType dtype_of();
template <> inline torch_cudnn_algo::kernels::DirectDType dtype_of<__half>() {
  return torch_cudnn_algo::kernels::DirectDType::kHalf;
}
template <> inline torch_cudnn_algo::kernels::DirectDType dtype_of<__nv_bfloat16>() {
  return torch_cudnn_algo::kernels::DirectDType::kBFloat16;
}
template <> inline torch_cudnn_algo::kernels::DirectDType dtype_of<float>() {
  return torch_cudnn_algo::kernels::DirectDType::kFloat;
}
template <> inline torch_cudnn_algo::kernels::DirectDType dtype_of<double>() {
  return torch_cudnn_algo::kernels::DirectDType::kDouble;
}
template <typename T> const char* dtype_name();
template <> inline const char* dtype_name<__half>() { return "fp16"; }
template <> inline const char* dtype_name<__nv_bfloat16>() { return "bf16"; }
template <> inline const char* dtype_name<float>() { return "fp32"; }
template <> inline const char* dtype_name<double>() { return "fp64"; }

// count values uniform in [-1, 1), rounded to T; as_float gets their exact float values.
template <typename T>
std::vector<T> rounded_random(int64_t count, std::mt19937& rng, std::vector<float>& as_float) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<T> out(count);
  as_float.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    out[i] = from_float<T>(dist(rng));
    as_float[i] = to_float<T>(out[i]);
  }
  return out;
}
