// What the pointwise kernels (pointwise_mma.cu forward and backward data,
// pointwise_filter.cu the filter gradient) share: which convolutions they
// take, and the row stride that keeps their shared-memory reads free of bank
// conflicts. Plain C++ (no CUDA, no torch).
#pragma once

#include "kernels/direct_conv.h"

#include <cstdint>
#include <initializer_list>

namespace torch_cudnn_algo::kernels {

// Channels on a side: whole 16-byte vectors of fp16/bf16 (every copy and
// store one aligned vector), at most this many.
inline constexpr int kPointwiseVector = 8;
inline constexpr int kPointwiseMaxChannels = 160;

// A 1x1 convolution at stride 1 without padding, one group, channels_last,
// fp16 or bf16, 8 to 160 channels on each side, a multiple of 8: one GEMM
// whose rows are whole contiguous pixels (x's, dy's and y's alike).
inline bool is_pointwise(const DirectConvShape& s, DirectDType dtype) {
  if (dtype != DirectDType::kHalf && dtype != DirectDType::kBFloat16) return false;
  if (!s.channels_last || s.groups != 1 || s.r != 1 || s.s != 1) return false;
  if (s.stride_h != 1 || s.stride_w != 1 || s.pad_h != 0 || s.pad_w != 0) return false;
  if (s.n < 1 || s.h < 1 || s.w < 1 || s.p != s.h || s.q != s.w) return false;
  for (const int64_t channels : {s.c, s.k})
    if (channels < kPointwiseVector || channels > kPointwiseMaxChannels || channels % kPointwiseVector != 0)
      return false;
  return true;
}

// Row stride, in elements, for staged rows of `elements` (a multiple of 8):
// 16 bytes more than a multiple of 32 bytes (an odd number of 16-byte units).
// Then a row stride is 4 mod 8 banks: 8 rows read at 4 consecutive words each
// (an mma fragment: rows g = 0..7, words t = 0..3), 4 rows two apart read at 8
// words each, and 8 lanes reading 16 bytes of 8 different rows all fall on 32
// different banks.
inline constexpr int pointwise_row_stride(int elements) {
  return elements % 16 == 0 ? elements + 8 : elements + 16;
}

}  // namespace torch_cudnn_algo::kernels
