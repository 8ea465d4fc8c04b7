// Element types the kernel files share (direct_conv.cu, depthwise.cu), written
// once: the accumulator type of each element type, the conversions to and from
// it, and the aligned vector a thread loads or stores channels with. CUDA
// device code: included by the kernel sources only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace torch_cudnn_algo::kernels {

// fp16, bf16 and fp32 accumulate in fp32; fp64 in fp64.
template <typename T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };

__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }

template <typename T> __device__ __forceinline__ T from_acc(float v);
template <> __device__ __forceinline__ __half from_acc<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <typename T> __device__ __forceinline__ T from_acc(double v) { return static_cast<T>(v); }

// VEC consecutive elements, aligned to their size: one load or store instruction.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, VEC>*>(p);
}

}  // namespace torch_cudnn_algo::kernels
