// The 16-bit element types' host values, DirectDType, and random operands, for
// the emulation mains (grouped_mma_main.cpp, stem_filter_main.cpp); included
// after the rewritten kernel file, which brings the types.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

template <typename T> float to_f(T v);
template <> inline float to_f<__half>(__half v) { return __half2float(v); }
template <> inline float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> torch_cudnn_algo::kernels::DirectDType dtype_of();
template <> inline torch_cudnn_algo::kernels::DirectDType dtype_of<__half>() {
  return torch_cudnn_algo::kernels::DirectDType::kHalf;
}
template <> inline torch_cudnn_algo::kernels::DirectDType dtype_of<__nv_bfloat16>() {
  return torch_cudnn_algo::kernels::DirectDType::kBFloat16;
}

// count elements uniform in [-1, 1), rounded to T; `as_float` gets their exact values.
template <typename T>
std::vector<T> random_operand(int64_t count, std::mt19937& rng, std::vector<float>& as_float) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<T> values(count);
  as_float.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    values[i] = T(dist(rng));
    as_float[i] = to_f(values[i]);
  }
  return values;
}
