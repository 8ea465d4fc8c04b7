// A tensor-core kernel for the filter gradient of the 1x1 convolutions of
// MBConv blocks (the shapes pointwise_mma.h takes forward): one group, stride
// 1, no padding, 8 to 160 channels on each side, fp16 and bf16, NHWC. The
// gradient dweight[k, c] = sum over pixels of dy[pixel, k] * x[pixel, c] is a
// GEMM with a small result and a reduction over every pixel; both operands
// are contiguous runs of pixels, so the kernel streams them in tiles.
// launch_direct_conv calls it where it applies; it is no launch of its own.
//
// This header is plain C++ (no CUDA, no torch), like direct_conv.h.
#pragma once

#include "kernels/direct_conv.h"

#include <cstddef>

struct CUstream_st;

namespace torch_cudnn_algo::kernels {

// Whether the shape suits the kernel, whatever the GPU and the operands'
// addresses: backward filter; fp16 or bf16; channels_last; one group; a 1x1
// filter at stride 1 without padding; 8 to 160 channels on each side, a
// multiple of 8; at most 128 16x8 tiles of the result (16 a warp).
bool pointwise_filter_fits(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction);

// Whether the kernel runs it on the current GPU: pointwise_filter_fits, x and
// dy 16-byte aligned (`aligned`: both are read by vectors), a GPU of compute
// capability 8.0 or later with the shared memory the plan needs.
bool pointwise_filter_applies(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction,
                              bool aligned);

// The workspace it needs: fp32 partial sums, a slice a block of the grid
// (which the GPU's SM count sizes). 0 when the shape does not fit.
size_t pointwise_filter_workspace_bytes(const DirectConvShape& shape, DirectDType dtype, int sm_count);

// Runs the filter gradient of a convolution pointwise_filter_applies took, on
// `stream`: (x, dy) -> dweight, written with shape.weight_strides;
// `workspace` holds pointwise_filter_workspace_bytes(...). Deterministic (no
// atomics: the partial sums are added in a fixed order). Returns the CUDA
// error code of the launch (0 on success).
int launch_pointwise_filter(const DirectConvShape& shape, DirectDType dtype, int sm_count, const void* x,
                            const void* dy, void* dweight, void* workspace, CUstream_st* stream);

}  // namespace torch_cudnn_algo::kernels
