// The convolution as it crosses the boundary: one value, a JSON object that
// src/torch_cudnn_algo/_ops.py writes from a ConvSpec in the cuDNN form
//   {"direction": "fwd", "input": [N, C, H, W], "weight": [K, C/g, R, S],
//    "padding": [..], "stride": [..], "dilation": [..], "groups": g,
//    "transposed": false, "output_padding": [..], "dtype": "float16",
//    "memory_format": "contiguous" | "channels_last" | "channels_last_3d"}
// and the keys the ops make of it.
#pragma once

#include "base/conv_key.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

// A user-level convolution (as F.convNd / F.conv_transposeNd take it): its
// operands as meta tensors (shapes, dtype and layout; nothing allocated).
struct ConvArgument {
  std::string direction;
  at::Tensor input;
  at::Tensor weight;
  std::vector<int64_t> padding;
  std::vector<int64_t> stride;
  std::vector<int64_t> dilation;
  int64_t groups = 1;
  bool transposed = false;
  std::vector<int64_t> output_padding;
};

// Reads the JSON object above; ValueError naming what is missing or malformed.
ConvArgument parse_conv_argument(const std::string& json);

// The key of `conv` run in its direction with `algo`; validates everything
// first. `device` defaults to the operands' own.
ConvKey user_conv_key(const ConvArgument& conv, int64_t algo, bool deterministic, bool allow_tf32,
                      std::optional<at::Device> device = std::nullopt);

// The CUDA device a query is about: the tensors' own or, for meta tensors (a
// description: nothing allocated), the current one.
at::Device query_device(const at::Tensor& input, const char* op);

// Checks the profiler's operands of a cuDNN problem x (*) w = y and returns its
// key. Operands by direction, as Runner::run takes them: fwd (x, w) -> y;
// bwd_data (dy, w) -> dx; bwd_filter (x, dy) -> dw.
ConvKey candidate_key(Direction dir, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                      at::IntArrayRef padding, at::IntArrayRef stride, at::IntArrayRef dilation,
                      int64_t groups, bool deterministic, bool allow_tf32);

}  // namespace torch_cudnn_algo
