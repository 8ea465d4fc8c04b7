// ConvKey: the complete description of one cuDNN convolution problem, used as
// the runner-cache key and to explain a refusal (parameters + Python repro).
//
// The geometry is always that of the cuDNN *forward* problem x (*) w = y, whatever
// direction runs on it; tensors are described in the memory format the runner
// hands to cuDNN (packed, canonical strides).
#pragma once

#include "base/common.h"

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string>

namespace torch_cudnn_algo {

constexpr int kMaxDims = 5;         // N, C, D, H, W
constexpr int kMaxSpatialDims = 3;  // D, H, W

// Plain old data: zero-filled on construction so bytewise hash/equality are exact.
struct ConvKey {
  ConvKey();

  int8_t direction;     // Direction
  int8_t dtype;         // at::ScalarType
  int8_t memory_format; // at::MemoryFormat of x, w and y
  int8_t dim;           // 4 or 5
  int8_t device;
  bool allow_tf32;
  bool deterministic;
  bool transposed;      // the user's op was a transposed convolution (x is its output)
  int32_t algo;         // legacy enum value of the pinned algorithm
  int64_t groups;
  std::array<int64_t, kMaxDims> input_sizes;
  std::array<int64_t, kMaxDims> weight_sizes;
  std::array<int64_t, kMaxDims> output_sizes;
  std::array<int64_t, kMaxSpatialDims> padding;
  std::array<int64_t, kMaxSpatialDims> stride;
  std::array<int64_t, kMaxSpatialDims> dilation;
  std::array<int64_t, kMaxSpatialDims> output_padding;  // transposed only

  Direction dir() const { return static_cast<Direction>(direction); }
  at::ScalarType scalar_type() const { return static_cast<at::ScalarType>(dtype); }
  at::MemoryFormat format() const { return static_cast<at::MemoryFormat>(memory_format); }
  at::IntArrayRef input() const { return {input_sizes.data(), static_cast<size_t>(dim)}; }
  at::IntArrayRef weight() const { return {weight_sizes.data(), static_cast<size_t>(dim)}; }
  at::IntArrayRef output() const { return {output_sizes.data(), static_cast<size_t>(dim)}; }

  bool operator==(const ConvKey& other) const;
};

// Word-wise hash of a zero-padded plain-old-data key (`bytes` a multiple of 8).
size_t hash_key_words(const void* key, size_t bytes);

struct ConvKeyHash {
  size_t operator()(const ConvKey& key) const { return hash_key_words(&key, sizeof(key)); }
};

// The dtypes cuDNN convolves; ATen rejects the others with its own message.
inline bool is_cudnn_float_type(at::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16 ||
         dtype == at::kDouble;
}

// Validates a forward convolution call *before anything is computed from it*:
// dimensionality, argument-list lengths (stock crashes with SIGFPE on a wrong
// length), positive strides/dilations, channel/group consistency, devices, dtypes,
// and that the kernel fits the padded input. Raises a clear error otherwise.
void check_conv_arguments(const at::Tensor& input, const at::Tensor& weight,
                          at::IntArrayRef padding, at::IntArrayRef stride,
                          at::IntArrayRef dilation, int64_t groups);

// Same for a transposed convolution (cudnn_convolution_transpose): weight is
// [C_in, C_out / groups, *kernel]; output_padding must be < stride or dilation.
void check_transposed_arguments(const at::Tensor& input, const at::Tensor& weight,
                                at::IntArrayRef padding, at::IntArrayRef output_padding,
                                at::IntArrayRef stride, at::IntArrayRef dilation, int64_t groups);

// Output sizes of a transposed convolution: the cuDNN problem's x.
std::array<int64_t, kMaxDims> conv_transpose_output_sizes(
    at::IntArrayRef input, at::IntArrayRef weight, at::IntArrayRef padding,
    at::IntArrayRef output_padding, at::IntArrayRef stride, at::IntArrayRef dilation,
    int64_t groups);

// Output sizes of the forward convolution (arguments already checked).
std::array<int64_t, kMaxDims> conv_output_sizes(at::IntArrayRef input, at::IntArrayRef weight,
                                                at::IntArrayRef padding, at::IntArrayRef stride,
                                                at::IntArrayRef dilation);

// The layout stock PyTorch gives a cuDNN convolution's output: channels-last
// (2d or 3d) when either operand's layout is, never for float64.
at::MemoryFormat stock_conv_memory_format(const at::Tensor& input, const at::Tensor& weight);
at::MemoryFormat stock_conv_memory_format(at::ScalarType dtype, int64_t dim, at::MemoryFormat a,
                                          at::MemoryFormat b);

// Packed strides of `sizes` in `format`.
c10::DimVector canonical_strides(at::IntArrayRef sizes, at::MemoryFormat format);

// Byte alignment of every operand handed to cuDNN. The graph API's engines are
// chosen for the frontend's default tensor alignment (16 bytes) and refuse other
// pointers (CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER): a view at an odd offset,
// such as the imaginary half of a small complex tensor, must be copied first.
constexpr uintptr_t kOperandAlignment = 16;

// `t` laid out as cuDNN wants it: contiguous in `format` with canonical strides
// (size-1 dimensions can carry any stride after .contiguous()), starting at a
// kOperandAlignment boundary. No copy if `t` already is.
at::Tensor as_canonical(const at::Tensor& t, at::MemoryFormat format);

// Geometry of a cuDNN forward problem x (*) w = y, for make_conv_key.
struct ConvProblem {
  at::IntArrayRef x_sizes;  // 4-d or 5-d
  at::IntArrayRef w_sizes;
  at::IntArrayRef padding, stride, dilation;
  int64_t groups;
  bool transposed = false;
  at::IntArrayRef output_padding = {};  // transposed only
};

// Key for `problem` run in `direction` with `algo`; arguments already checked.
ConvKey make_conv_key(Direction direction, int algo, const ConvProblem& problem,
                      at::ScalarType dtype, const at::Device& device, bool deterministic,
                      bool allow_tf32, at::MemoryFormat format);

// "conv2d: input [8, 64, 56, 56] float16 channels_last, weight [64, 64, 3, 3], ..."
std::string describe_conv(const ConvKey& key);

// A self-contained Python snippet reproducing the call with the pinned choice,
// given as the Python literal the flag is assigned ("1  # IMPLICIT_PRECOMP_GEMM").
std::string python_repro(const ConvKey& key, const std::string& choice_literal, bool strict);

// The cuDNN problem as a JSON object, what the Python profiler and tune() read:
// {"direction": "fwd", "input": [x sizes], "weight": [...], "output": [y sizes],
//  "padding": [...], "stride": [...], "dilation": [...], "groups": 1, "dtype": "float16",
//  "channels_last": true, "device": 0, "deterministic": false, "allow_tf32": true,
//  "transposed": false}
std::string json_request(const ConvKey& key);

}  // namespace torch_cudnn_algo
