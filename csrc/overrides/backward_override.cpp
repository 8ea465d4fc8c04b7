// The CUDA kernel of aten::convolution_backward while any choice is pinned (or
// conv_profile is on).
// When stock would run cuDNN (ordinary or transposed), the pinned gradients are
// computed with the pinned runner (legacy algorithm or engine), per cuDNN's mapping:
//
//                      grad_input                 grad_weight
//   ordinary conv      backward-data  (bwd_data)  backward-filter (bwd_filter)
//   transposed conv    forward        (fwd)       backward-filter, operands swapped
//
// Every gradient that is not pinned (or whose pinned algorithm cannot run) and
// every other backend come from at::native::convolution_backward, in one call.
#include "base/conv_key.h"
#include "base/cudnn_handle.h"
#include "base/torch_release.h"
#include "decide/selection.h"
#include "overrides/overrides.h"
#include "run/runner.h"

#include <ATen/Context.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/convolution_backward_native.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <array>
#include <cstring>
#include <optional>
#include <unordered_map>

namespace torch_cudnn_algo {
namespace {

// A parameter list as ATen's convolution_backward reads it (expand_param_if_needed):
// one value stands for every spatial dimension. nullopt for any other length,
// which ATen itself rejects with its own message.
std::optional<c10::DimVector> expand_param(at::IntArrayRef values, size_t spatial) {
  if (values.size() == spatial) return c10::DimVector(values.begin(), values.end());
  if (values.size() == 1) return c10::DimVector(spatial, values[0]);
  return std::nullopt;
}

// The call's parameters, expanded; present only when the call is one our path
// can take. Anything else (unusual ranks, mixed dtypes or devices, invalid values)
// goes to ATen's kernel, which accepts or rejects it with its own checks: we add
// no errors of our own to a backward pass.
struct BackwardParams {
  c10::DimVector stride, padding, dilation, output_padding;
};

std::optional<BackwardParams> pinnable_params(const at::Tensor& grad_output,
                                              const at::Tensor& input, const at::Tensor& weight,
                                              at::IntArrayRef stride, at::IntArrayRef padding,
                                              at::IntArrayRef dilation,
                                              at::IntArrayRef output_padding, int64_t groups) {
  const int64_t dim = input.dim();
  if (dim < 3 || dim > 5 || weight.dim() != dim || grad_output.dim() != dim || groups < 1) {
    return std::nullopt;
  }
  const auto dtype = input.scalar_type();
  if (!is_cudnn_float_type(dtype) || weight.scalar_type() != dtype ||
      grad_output.scalar_type() != dtype || !input.is_cuda() ||
      weight.device() != input.device() || grad_output.device() != input.device()) {
    return std::nullopt;
  }
  // Empty tensors: ATen's cuDNN backward returns without calling cuDNN.
  if (input.numel() == 0 || grad_output.numel() == 0 || weight.numel() == 0) {
    return std::nullopt;
  }
  const auto spatial = static_cast<size_t>(dim - 2);
  auto s = expand_param(stride, spatial), p = expand_param(padding, spatial),
       d = expand_param(dilation, spatial), op = expand_param(output_padding, spatial);
  if (!s || !p || !d || !op) return std::nullopt;
  for (size_t i = 0; i < spatial; ++i) {
    if ((*s)[i] < 1 || (*d)[i] < 1 || (*p)[i] < 0 || (*op)[i] < 0) return std::nullopt;
  }
  return BackwardParams{std::move(*s), std::move(*p), std::move(*d), std::move(*op)};
}

// Everything ATen's backend choice for a CUDA convolution reads: shapes, dtype,
// device, the operands' suggested layouts, the parameters, whether cuDNN is
// enabled and (torch >= 2.13) which kernel runs depthwise convolutions. Plain old
// data, zero-filled, hashed and compared bytewise.
struct BackendQuery {
  BackendQuery() { std::memset(static_cast<void*>(this), 0, sizeof(*this)); }

  int8_t dtype, input_format, weight_format, dim, device, depthwise_kernel;
  bool transposed, has_bias, cudnn_enabled;
  int64_t groups;
  std::array<int64_t, kMaxDims> input, weight;
  std::array<int64_t, kMaxSpatialDims> stride, padding, dilation, output_padding;

  bool operator==(const BackendQuery& other) const {
    return std::memcmp(this, &other, sizeof(*this)) == 0;
  }
};
static_assert(sizeof(BackendQuery) % sizeof(uint64_t) == 0, "hashed in 8-byte words");

struct BackendQueryHash {
  size_t operator()(const BackendQuery& query) const { return hash_key_words(&query, sizeof(query)); }
};

BackendQuery backend_query(const at::Tensor& input, const at::Tensor& weight,
                           at::OptionalIntArrayRef bias_sizes, const BackwardParams& params,
                           bool transposed, int64_t groups) {
  BackendQuery query;
  query.dtype = static_cast<int8_t>(input.scalar_type());
  query.input_format = static_cast<int8_t>(input.suggest_memory_format());
  query.weight_format = static_cast<int8_t>(weight.suggest_memory_format());
  query.dim = static_cast<int8_t>(input.dim());
  query.device = static_cast<int8_t>(input.device().index());
  query.transposed = transposed;
  query.has_bias = bias_sizes.has_value();
  query.cudnn_enabled = at::globalContext().userEnabledCuDNN();
  query.depthwise_kernel = cudnn_depthwise_kernel_setting();
  query.groups = groups;
  std::copy(input.sizes().begin(), input.sizes().end(), query.input.begin());
  std::copy(weight.sizes().begin(), weight.sizes().end(), query.weight.begin());
  std::copy(params.stride.begin(), params.stride.end(), query.stride.begin());
  std::copy(params.padding.begin(), params.padding.end(), query.padding.begin());
  std::copy(params.dilation.begin(), params.dilation.end(), query.dilation.begin());
  std::copy(params.output_padding.begin(), params.output_padding.end(), query.output_padding.begin());
  return query;
}

bool select_cudnn_backend(const at::Tensor& input, const at::Tensor& weight,
                          at::OptionalIntArrayRef bias_sizes, const BackwardParams& params,
                          bool transposed, int64_t groups) {
  const auto backend = at::native::select_conv_backend(
      input, weight, std::nullopt, c10::fromIntArrayRefSlow(params.stride),
      c10::fromIntArrayRefSlow(params.padding), c10::fromIntArrayRefSlow(params.dilation),
      transposed, c10::fromIntArrayRefSlow(params.output_padding), groups,
      bias_sizes ? at::OptionalSymIntArrayRef(c10::fromIntArrayRefSlow(*bias_sizes))
                 : at::OptionalSymIntArrayRef(std::nullopt));
  return backend == at::native::ConvBackend::Cudnn ||
         backend == at::native::ConvBackend::CudnnTranspose;
}

// Whether stock's backward would run cuDNN for this call. ATen's answer is a
// function of the BackendQuery alone, so each thread asks ATen once per query
// (select_conv_backend costs microseconds on every backward call otherwise).
bool stock_runs_cudnn(const at::Tensor& input, const at::Tensor& weight,
                      at::OptionalIntArrayRef bias_sizes, const BackwardParams& params,
                      bool transposed, int64_t groups) {
  thread_local std::unordered_map<BackendQuery, bool, BackendQueryHash> answers;
  const auto query = backend_query(input, weight, bias_sizes, params, transposed, groups);
  if (const auto it = answers.find(query); it != answers.end()) return it->second;
  const bool cudnn = select_cudnn_backend(input, weight, bias_sizes, params, transposed, groups);
  answers.emplace(query, cudnn);
  return cudnn;
}

// Raises a clear error unless input, weight and grad_output describe one
// convolution with these parameters (the shape checks of a forward call, plus
// grad_output's exact shape).
void check_backward_geometry(const at::Tensor& grad_output, const at::Tensor& input,
                             const at::Tensor& weight, const BackwardParams& params,
                             bool transposed, int64_t groups) {
  const char* what = transposed ? "conv_transpose" : "conv";
  if (transposed) {
    TORCH_CHECK(input.size(1) == weight.size(0) && weight.size(0) % groups == 0,
                "torch_cudnn_algo: convolution_backward: input has ", input.size(1),
                " channels but the transposed weight of shape ", weight.sizes(), " with groups=",
                groups, " expects ", weight.size(0));
  } else {
    TORCH_CHECK(input.size(1) == weight.size(1) * groups && weight.size(0) % groups == 0,
                "torch_cudnn_algo: convolution_backward: input has ", input.size(1),
                " channels but weight of shape ", weight.sizes(), " with groups=", groups,
                " expects ", weight.size(1) * groups);
  }
  const auto expected =
      transposed ? conv_transpose_output_sizes(input.sizes(), weight.sizes(), params.padding,
                                               params.output_padding, params.stride,
                                               params.dilation, groups)
                 : conv_output_sizes(input.sizes(), weight.sizes(), params.padding,
                                     params.stride, params.dilation);
  const at::IntArrayRef expected_sizes(expected.data(), static_cast<size_t>(input.dim()));
  TORCH_CHECK(grad_output.sizes() == expected_sizes, "torch_cudnn_algo: convolution_backward: "
              "grad_output has shape ", grad_output.sizes(), " but the ", what, " of input ",
              input.sizes(), " with weight ", weight.sizes(), " (stride ", params.stride,
              ", padding ", params.padding, ", dilation ", params.dilation,
              transposed ? ", output_padding " : "", transposed ? c10::str(params.output_padding) : "",
              ", groups ", groups, ") has output shape ", expected_sizes);
}

// Prepends the H=1 dimension's value to a 1-d parameter list.
c10::DimVector as_2d(int64_t first, at::IntArrayRef values) {
  c10::DimVector out{first};
  out.append(values.begin(), values.end());
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_override(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::OptionalIntArrayRef bias_sizes, at::IntArrayRef stride, at::IntArrayRef padding,
    at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> output_mask) {
  const auto stock = [&](std::array<bool, 3> mask) {
    return at::native::convolution_backward(grad_output, input, weight, bias_sizes, stride,
                                            padding, dilation, transposed, output_padding, groups,
                                            mask);
  };
  const Direction data_direction = transposed ? Direction::kForward : Direction::kBackwardData;
  const bool pin_data = output_mask[0] && direction_active(data_direction);
  const bool pin_filter = output_mask[1] && direction_active(Direction::kBackwardFilter);
  if (!(pin_data || pin_filter)) {
    return stock(output_mask);
  }
  const auto params = pinnable_params(grad_output, input, weight, stride, padding, dilation,
                                      output_padding, groups);
  if (!params || !stock_runs_cudnn(input, weight, bias_sizes, *params, transposed, groups)) {
    return stock(output_mask);
  }
  // x, w and y must be one consistent problem before anything runs: our
  // descriptors would otherwise describe memory the tensors do not have. Stock
  // reaches the same verdict only through cuDNN, and only while ATen's own
  // cache of execution plans misses (its key ignores grad_output's shape: once
  // the valid call ran, the wrong one runs silently on the cached execution
  // plan). Raise it here, always.
  check_backward_geometry(grad_output, input, weight, *params, transposed, groups);

  const c10::cuda::CUDAGuard device_guard(input.device());
  auto& context = at::globalContext();
  const bool deterministic = context.deterministicCuDNN() || context.deterministicAlgorithms();
  const bool allow_tf32 = context.allowTF32CuDNN(at::Float32Op::CONV);

  // 1-d convolutions run as the 2-d problem [N, C, 1, L], as ATen does.
  const bool is_1d = input.dim() == 3;
  const at::Tensor in = is_1d ? input.contiguous().unsqueeze(2) : input;
  const at::Tensor go = is_1d ? grad_output.unsqueeze(2) : grad_output;
  const at::Tensor w = is_1d ? weight.unsqueeze(2) : weight;
  const auto pad = is_1d ? as_2d(0, params->padding) : params->padding;
  const auto str = is_1d ? as_2d(1, params->stride) : params->stride;
  const auto dil = is_1d ? as_2d(1, params->dilation) : params->dilation;
  const auto out_pad = is_1d ? as_2d(0, params->output_padding) : params->output_padding;

  // The layouts stock gives the gradients, decided as ATen's cuDNN backward
  // decides them, from the tensors it actually holds: input in the backend layout
  // when the weight gradient needs it, grad_output in that input's suggested
  // layout; grad_input then follows (grad_output, weight), grad_weight follows
  // (input, grad_output). Channel-count-1 tensors make the suggested layouts
  // differ from the backend's, so they are read off the tensors, not derived.
  const at::Tensor in_c = output_mask[1] ? in.contiguous(stock_conv_memory_format(in, w)) : in;
  const at::Tensor go_c = go.contiguous(in_c.suggest_memory_format());
  const auto dtype = in.scalar_type();
  const auto data_format = stock_conv_memory_format(go_c, w);
  const auto filter_format = stock_conv_memory_format(in_c, go_c);

  // The cuDNN problem x (*) w = y: x is the input of an ordinary convolution and
  // the output (grad_output's side) of a transposed one.
  const at::Tensor& x = transposed ? go_c : in_c;
  const at::Tensor& y = transposed ? in_c : go_c;
  const ConvProblem problem{x.sizes(), w.sizes(), pad, str, dil, groups, transposed, out_pad};
  const auto key_for = [&](Direction direction, at::MemoryFormat format) {
    return make_conv_key(direction, kNoChoice, problem, dtype, in.device(), deterministic,
                         allow_tf32, format);
  };

  at::Tensor grad_input, grad_weight, grad_bias;
  if (pin_data) {
    if (const auto selected = select_runner(key_for(data_direction, data_format))) {
      // Forward (transposed) takes (x = grad_output, w); backward-data (dy, w): same operands.
      grad_input = allocate_output(in.sizes(), in.options().memory_format(data_format));
      selected.run(as_canonical(go_c, data_format), as_canonical(w, data_format), grad_input);
      if (is_1d) grad_input = grad_input.squeeze(2);
    }
  }
  if (pin_filter) {
    if (const auto selected = select_runner(key_for(Direction::kBackwardFilter, filter_format))) {
      grad_weight = allocate_output(w.sizes(), w.options().memory_format(filter_format));
      selected.run(as_canonical(x, filter_format), as_canonical(y, filter_format), grad_weight);
      if (is_1d) grad_weight = grad_weight.squeeze(2);
    }
  }

  const std::array<bool, 3> rest{output_mask[0] && !grad_input.defined(),
                                 output_mask[1] && !grad_weight.defined(), output_mask[2]};
  if (rest[0] || rest[1]) {
    auto [stock_input, stock_weight, stock_bias] = stock(rest);
    if (rest[0]) grad_input = std::move(stock_input);
    if (rest[1]) grad_weight = std::move(stock_weight);
    grad_bias = std::move(stock_bias);
  } else if (output_mask[2]) {
    // As ATen computes it: the sum over every dimension but channels.
    c10::DimVector dims{0};
    for (int64_t d = 2; d < grad_output.dim(); ++d) dims.push_back(d);
    grad_bias = grad_output.sum(dims);
  }
  return {std::move(grad_input), std::move(grad_weight), std::move(grad_bias)};
}

}  // namespace

void register_backward_override(torch::Library& lib) {
  lib.impl("convolution_backward", TORCH_FN(convolution_backward_override));
}

}  // namespace torch_cudnn_algo
