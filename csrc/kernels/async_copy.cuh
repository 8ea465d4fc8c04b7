// cp.async helpers of our tensor-core kernels (grouped_mma.cu, gemm_filter.cu,
// pointwise_mma.cu, pointwise_filter.cu):
// 16-byte copies from global to shared memory that bypass registers, so that a
// block keeps many loads in flight while it multiplies what landed earlier.
// They need compute capability 8.0; below it they compile to nothing (the
// kernels that use them are refused there).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace torch_cudnn_algo::kernels {
namespace {  // internal linkage: each including translation unit has its own copy

// 16 bytes from global to shared memory without a register round trip; zeros
// instead when !live (src-size 0 reads nothing: `global` need only be valid).
// .ca keeps the line in L1: neighbouring pixels' taps read it again.
__device__ __forceinline__ void copy_16_or_zero(void* shared, const void* global, bool live) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(global), "r"(live ? 16 : 0)
               : "memory");
#endif
}

__device__ __forceinline__ void commit_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most `Pending` of this thread's committed copy groups are in flight.
template <int Pending>
__device__ __forceinline__ void wait_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

// Copies `rows` rows of `row_vectors` 16-byte vectors each, contiguous at
// `from` (a tile of a dense row-major array), into shared rows `ld` elements
// apart at `to`, thread `thread` of `threads` taking every threads-th vector in
// memory order; rows from `rows_left` on are zero-filled (`valid`: any
// readable address, read by none).
template <typename T>
__device__ __forceinline__ void copy_rows_or_zero(T* to, int ld, const T* from, int64_t rows_left, int rows,
                                                  int row_vectors, const T* valid, int thread, int threads) {
  constexpr int kElements = 16 / sizeof(T);
  for (int v = thread; v < rows * row_vectors; v += threads) {
    const int row = v / row_vectors, column = (v - row * row_vectors) * kElements;
    const bool live = row < rows_left;
    copy_16_or_zero(to + row * ld + column, live ? from + static_cast<int64_t>(v) * kElements : valid, live);
  }
}

// In a pipeline of `stages` tiles (2 to 4), each tile's copies one committed
// group: waits until the oldest tile's copies are done, the stages - 2 newer
// ones may still be in flight (wait_group takes its count as an immediate).
__device__ __forceinline__ void wait_oldest_tile(int stages) {
  if (stages >= 4)
    wait_copies<2>();
  else if (stages == 3)
    wait_copies<1>();
  else
    wait_copies<0>();
}

}  // namespace
}  // namespace torch_cudnn_algo::kernels
