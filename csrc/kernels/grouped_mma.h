// A tensor-core kernel for grouped convolutions with 8 to 64 channels a group
// (RegNet, ResNeXt), forward and backward data, fp16 and bf16, NHWC. The
// direct gather kernel (direct_conv.cu) sums such groups on CUDA cores, which
// makes them compute bound far above their memory time; as one implicit GEMM
// per group on tensor cores they run near their memory time again.
// launch_direct_conv calls it where it applies; it is no launch of its own.
//
// This header is plain C++ (no CUDA, no torch), like direct_conv.h.
#pragma once

#include "kernels/direct_conv.h"

struct CUstream_st;

namespace torch_cudnn_algo::kernels {

// Whether the tensor-core kernel runs this convolution on the current GPU:
// forward or backward data; fp16 or bf16; channels_last; 8 to 64 channels a
// group on each side, a multiple of 8; the source and destination operands
// 16-byte aligned (`aligned`); a GPU of compute capability 8.0 or later with the
// shared memory the group's weights need. Otherwise the gather kernel runs it.
bool grouped_mma_applies(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction, bool aligned);

// Runs a convolution grouped_mma_applies took, on `stream`: forward (x, weight)
// -> y, backward data (dy, weight) -> dx. wide_index: 64-bit index arithmetic
// (DirectLaunch::wide_index). Returns the CUDA error code of the launch (0 on
// success). No workspace; deterministic (no atomics).
int launch_grouped_mma(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction, bool wide_index,
                       int sm_count, const void* source, const void* weight, void* destination, CUstream_st* stream);

}  // namespace torch_cudnn_algo::kernels
