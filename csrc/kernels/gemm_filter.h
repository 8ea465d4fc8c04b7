// A tensor-core kernel for filter gradients with few (ci, r, s) products a
// group: stems (an image's 3 input channels, the first layer of MobileNet,
// EfficientNet, RegNet and ResNeXt) and grouped convolutions of 8 to 32
// channels a group (RegNet's 24, ResNeXt's 8 to 32). Per group the filter
// gradient is one GEMM over every output pixel, dweight[(ci, r, s), k] = sum
// over pixels of im2col(x)[pixel, (ci, r, s)] * dy[pixel, k], with a small
// result and a huge reduction. On an H200 the best of cuDNN's list runs the
// stems' at 7-14x their memory time and the generic filter kernel
// (direct_conv.cu) at 30-130x, summing them on CUDA cores.
// launch_direct_conv calls it where it applies; it is no launch of its own.
//
// This header is plain C++ (no CUDA, no torch), like direct_conv.h.
#pragma once

#include "kernels/direct_conv.h"

#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace torch_cudnn_algo::kernels {

// Whether the shape suits the kernel, whatever the GPU and the operands'
// addresses: backward filter; fp16 or bf16; channels_last; at most 65535
// groups; per group a multiple of 8 output channels, at most 64, and at most
// 288 (ci, r, s) rows (32 channels of a 3x3 filter, a 7x7 filter of 3); at
// most 10 16x16 result tiles a warp; the staged tile fits in 48 KB of shared
// memory (by element), or two of them in 99 KB, the least opt-in limit of the
// GPUs it runs on (by vector: a group's input channels whole 16-byte vectors).
bool gemm_filter_fits(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction);

// Whether the kernel runs it on the current GPU: gemm_filter_fits, dy 16-byte
// aligned (`dy_aligned`: it is read by vectors), x 16-byte aligned
// (`x_aligned`) where a group's input channels are whole vectors (x is read
// by vectors then), and compute capability 8.0 or later (bf16 tensor cores,
// cp.async). Otherwise the generic filter kernel runs it.
bool gemm_filter_applies(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction, bool x_aligned,
                         bool dy_aligned);

// The workspace it needs: fp32 partial sums, a slice of every group's per
// block column of the grid (which the GPU's SM count sizes). 0 when the shape
// does not fit.
size_t gemm_filter_workspace_bytes(const DirectConvShape& shape, DirectDType dtype, int sm_count);

// Runs the filter gradient of a convolution gemm_filter_applies took, on
// `stream`: (x, dy) -> dweight, written with shape.weight_strides; `workspace`
// holds gemm_filter_workspace_bytes(...). Deterministic (no atomics: the partial sums are added
// in a fixed order). Returns the CUDA error code of the launch (0 on success).
int launch_gemm_filter(const DirectConvShape& shape, DirectDType dtype, int sm_count, const void* x, const void* dy,
                       void* dweight, void* workspace, CUstream_st* stream);

}  // namespace torch_cudnn_algo::kernels
