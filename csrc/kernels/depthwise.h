// Depthwise convolution kernels for channels_last (NHWC) operands, all three
// directions (MobileNet, EfficientNet, ConvNeXt). The gather kernels in
// direct_conv.cu run a depthwise layer one output pixel per thread, reloading
// every input vector once per tap; these give a thread a strip of output
// columns, slide a window of input vectors over it in registers and keep the
// filter row in registers, which is what brings them near their memory time.
// At stride 1 in fp16 and bf16 they run on tensor cores (mma.sync), each image
// row of a channel a product with a banded (Toeplitz) matrix of its taps.
// launch_direct_conv calls them where they apply; they are no launch of their own.
//
// This header is plain C++ (no CUDA, no torch), like direct_conv.h.
#pragma once

#include "kernels/direct_conv.h"

#include <cstddef>

struct CUstream_st;

namespace torch_cudnn_algo::kernels {

// Whether the depthwise kernels run this convolution: channel multiplier 1
// (groups == c == k), channels_last, fp16, bf16 or fp32, any filter size,
// stride, padding and dilation; every channel count (16-byte vectors where the
// channels and pointers allow, narrower ones otherwise). Refused (the generic
// kernels run it): fp64, NCHW, a filter whose taps do not fit in shared memory,
// one image row of 2^31 elements or more.
bool depthwise_applies(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction);

// The backward-filter partial sums' bytes (0 for the other directions):
// per-block fp32 partials that a finish kernel adds in a fixed order.
size_t depthwise_workspace_bytes(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction,
                                 int sm_count);

// Runs a convolution depthwise_applies took, on `stream`; operands as
// launch_direct_conv's. Deterministic (no atomics). Returns the CUDA error code
// of the launch (0 on success).
int launch_depthwise(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction, int sm_count,
                     const void* a, const void* b, void* out, void* workspace, CUstream_st* stream);

// For benchmarks and tests: false makes depthwise_applies refuse everything, so
// that prepare_direct_conv sends depthwise convolutions to the generic kernels.
// Process-wide; true by default.
void set_depthwise_enabled(bool enabled);

// For benchmarks and tests: false keeps every direction off the tensor-core
// kernels (depthwise_mma.cuh, depthwise_mma_filter.cuh), on the CUDA-core ones.
// Process-wide; true by default.
void set_depthwise_mma_enabled(bool enabled);

}  // namespace torch_cudnn_algo::kernels
