// The warp-level tensor-core multiply-add our kernels call where they need
// the fragments' layout (which wmma leaves opaque): mma.sync m16n8k16, fp16 or
// bf16 in, fp32 accumulate. Needs compute capability 8.0; below it the call
// compiles to nothing (the kernels that use it are refused there).
//
// Fragment layout (PTX ISA, "Matrix Fragments for mma.m16n8k16"), for lane
// = 4 * g + t (g = lane / 4, t = lane % 4), each 32-bit register holding two
// 16-bit elements, the lower one first:
//   a[0]: A[g][2t, 2t+1]      a[1]: A[g+8][2t, 2t+1]
//   a[2]: A[g][2t+8, 2t+9]    a[3]: A[g+8][2t+8, 2t+9]
//   b[0]: B[2t, 2t+1][g]      b[1]: B[2t+8, 2t+9][g]
//   d[0], d[1]: D[g][2t, 2t+1]    d[2], d[3]: D[g+8][2t, 2t+1]
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace torch_cudnn_algo::kernels {
namespace {  // internal linkage: each including translation unit has its own copy

// d += A (16x16, row major) * B (16x8, column major), over the warp.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "mma_16816: fp16 or bf16");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#endif
}

}  // namespace
}  // namespace torch_cudnn_algo::kernels
