// The store the harness kernels hand to the extension's sum_slices
// (csrc/kernels/slice_sum.cuh): a filter gradient's total for element e written,
// converted to the element type, at e of a dense array.
#pragma once

#include "kernels/element_types.h"

#include <cstdint>

template <typename T>
struct DenseStore {
  T* out;
  __device__ __forceinline__ void operator()(int64_t e, float total) const {
    out[e] = torch_cudnn_algo::kernels::from_acc<T>(total);
  }
};
