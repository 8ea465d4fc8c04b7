// Our own direct convolution kernels, for the convolutions cuDNN serves worst:
// depthwise, grouped with few channels per group, and those with one channel
// on a side (ConvTasNet's transposed decoder). They read each operand once
// from memory and keep reuse in caches, which is what a memory-bound
// convolution needs; cuDNN's kernels for these reach 2-20% of bandwidth.
//
// This header is plain C++ (no CUDA, no torch): the kernels are compiled by
// nvcc alone in direct_conv.cu, and the rest of the extension calls them
// through these launchers on the current stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

struct CUstream_st;

namespace torch_cudnn_algo::kernels {

enum class DirectDType : int8_t { kHalf, kBFloat16, kFloat, kDouble };

// One 2-d convolution (1-d as height 1): x [n, c, h, w] * weight [k, c/groups, r, s]
// -> y [n, k, p, q]. x and y are dense in NCHW or in NHWC (channels_last);
// the weight may have any strides (k, c, r, s order).
struct DirectConvShape {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t k = 0, p = 0, q = 0;
  int64_t r = 0, s = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  bool channels_last = false;
  int64_t weight_strides[4] = {0, 0, 0, 0};
};

enum class DirectDirection : int8_t { kForward, kBackwardData, kBackwardFilter };

// Everything a launch needs, decided once per convolution (a runner keeps it):
// whether the kernels run it, the workspace, the index width.
struct DirectLaunch {
  DirectConvShape shape;
  DirectDType dtype = DirectDType::kFloat;
  DirectDirection direction = DirectDirection::kForward;
  int sm_count = 0;  // of the GPU it runs on: it sizes the backward-filter slices
  std::string refusal;  // why the kernels cannot run it; "" when they can
  // The backward-filter partial sums (0 otherwise). Deterministic: partial sums
  // are added in a fixed order, no atomics.
  size_t workspace_bytes = 0;
  bool wide_index = false;  // 64-bit index arithmetic: a tensor of 2^31 elements or more
  bool depthwise = false;   // the depthwise kernels run it (depthwise.h)
  // The shape suits the GEMM filter kernel (gemm_filter.h): the filter gradient
  // runs it where the GPU and the operands' alignment allow, checked at launch.
  bool gemm_filter = false;
};

DirectLaunch prepare_direct_conv(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction,
                                 int sm_count);

// Runs a prepared convolution on `stream`. Operands by direction, like a Runner's:
//   forward         (x, weight) -> y
//   backward data   (dy, weight) -> dx
//   backward filter (x, dy) -> dweight (written with shape.weight_strides)
// `workspace` holds launch.workspace_bytes. Returns the CUDA error code of the
// launch (0 on success).
int launch_direct_conv(const DirectLaunch& launch, const void* a, const void* b, void* out, void* workspace,
                       CUstream_st* stream);

// The CUDA error text of a launch's code.
const char* direct_conv_error_string(int code);

// Why the kernels cannot run on the current GPU ("" when they can): the build
// has neither machine code for its architecture nor PTX its driver compiles.
std::string direct_conv_image_problem();

// The architectures the kernels were compiled for: machine code, then PTX
// ("sm_80 sm_90 compute_90").
std::string direct_conv_architectures();

}  // namespace torch_cudnn_algo::kernels
