// A tensor-core kernel for the 1x1 convolutions of MBConv blocks: one group,
// stride 1, no padding, 8 to 160 channels on each side, fp16 and bf16, NHWC,
// forward and backward data. Such a convolution is one GEMM whose rows are
// whole contiguous pixels, so the kernel streams its operands in contiguous
// tiles and spends nothing on per-tap indexing: few channels make it memory
// bound, and streaming is what a memory-bound GEMM needs.
// launch_direct_conv calls it where it applies; it is no launch of its own.
//
// This header is plain C++ (no CUDA, no torch), like direct_conv.h.
#pragma once

#include "kernels/direct_conv.h"

struct CUstream_st;

namespace torch_cudnn_algo::kernels {

// Whether the pointwise kernel runs this convolution on the current GPU:
// forward or backward data; fp16 or bf16; channels_last; one group; a 1x1
// filter at stride 1 without padding; 8 to 160 channels on each side, a
// multiple of 8; the source and destination operands 16-byte aligned
// (`aligned`); a GPU of compute capability 8.0 or later.
bool pointwise_mma_applies(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction, bool aligned);

// Runs a convolution pointwise_mma_applies took, on `stream`: forward (x,
// weight) -> y, backward data (dy, weight) -> dx. Returns the CUDA error code
// of the launch (0 on success). No workspace; deterministic (no atomics).
int launch_pointwise_mma(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction, int sm_count,
                         const void* source, const void* weight, void* destination, CUstream_st* stream);

}  // namespace torch_cudnn_algo::kernels
