// The 16-bit element types' host values and DirectDType, for the emulation
// mains (grouped_mma_main.cpp, stem_filter_main.cpp); included after the
// rewritten kernel file, which brings the types.
#pragma once

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
