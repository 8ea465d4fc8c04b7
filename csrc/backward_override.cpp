// The CUDA kernel of aten::convolution_backward while any choice is pinned (or
// conv_profile is on).
// When stock would run cuDNN (ordinary or transposed), the pinned gradients are
// computed with the legacy API, per cuDNN's mapping:
//
//                      grad_input                 grad_weight
//   ordinary conv      backward-data  (bwd_data)  backward-filter (bwd_filter)
//   transposed conv    forward        (fwd)       backward-filter, operands swapped
//
// Every gradient that is not pinned (or whose pinned algorithm cannot run) and
// every other backend come from at::native::convolution_backward, in one call.
#include "conv_key.h"
#include "plan.h"
#include "overrides.h"
#include "selection.h"

#include <ATen/Context.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/convolution_backward_native.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace torch_cudnn_algo {
namespace {

// What ATen's implementation divides by or indexes with, checked first: a wrong
// length there crashes the process instead of raising.
void check_backward_arguments(const at::Tensor& grad_output, const at::Tensor& input,
                              const at::Tensor& weight, at::IntArrayRef stride,
                              at::IntArrayRef padding, at::IntArrayRef dilation,
                              at::IntArrayRef output_padding, int64_t groups) {
  const int64_t dim = input.dim();
  TORCH_CHECK(dim >= 3 && dim <= 5, "torch_cudnn_algo: convolution_backward expects a 3-d, 4-d "
              "or 5-d input, got shape ", input.sizes());
  TORCH_CHECK(weight.dim() == dim && grad_output.dim() == dim,
              "torch_cudnn_algo: input, weight and grad_output must have the same number of "
              "dimensions, got ", input.sizes(), ", ", weight.sizes(), ", ", grad_output.sizes());
  const auto spatial = static_cast<size_t>(dim - 2);
  TORCH_CHECK(stride.size() == spatial && padding.size() == spatial &&
                  dilation.size() == spatial && output_padding.size() == spatial,
              "torch_cudnn_algo: stride, padding, dilation and output_padding must each have ",
              spatial, " values for a ", dim, "-d input; got stride ", stride, ", padding ",
              padding, ", dilation ", dilation, ", output_padding ", output_padding);
  for (size_t i = 0; i < spatial; ++i) {
    TORCH_CHECK(stride[i] >= 1 && dilation[i] >= 1, "torch_cudnn_algo: stride and dilation must "
                "be >= 1, got stride ", stride, ", dilation ", dilation);
  }
  TORCH_CHECK(groups >= 1, "torch_cudnn_algo: groups must be >= 1, got ", groups);
}

bool stock_runs_cudnn(const at::Tensor& input, const at::Tensor& weight,
                      at::OptionalIntArrayRef bias_sizes, at::IntArrayRef stride,
                      at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                      at::IntArrayRef output_padding, int64_t groups) {
  const auto backend = at::native::select_conv_backend(
      input, weight, std::nullopt, c10::fromIntArrayRefSlow(stride),
      c10::fromIntArrayRefSlow(padding), c10::fromIntArrayRefSlow(dilation), transposed,
      c10::fromIntArrayRefSlow(output_padding), groups,
      bias_sizes ? at::OptionalSymIntArrayRef(c10::fromIntArrayRefSlow(*bias_sizes))
                 : at::OptionalSymIntArrayRef(std::nullopt));
  return backend == at::native::ConvBackend::Cudnn ||
         backend == at::native::ConvBackend::CudnnTranspose;
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
  check_backward_arguments(grad_output, input, weight, stride, padding, dilation, output_padding,
                           groups);
  const auto stock = [&](std::array<bool, 3> mask) {
    return at::native::convolution_backward(grad_output, input, weight, bias_sizes, stride,
                                            padding, dilation, transposed, output_padding, groups,
                                            mask);
  };
  const Direction data_direction = transposed ? Direction::kForward : Direction::kBackwardData;
  const bool pin_data = output_mask[0] && direction_active(data_direction);
  const bool pin_filter = output_mask[1] && direction_active(Direction::kBackwardFilter);
  // Empty tensors: ATen's cuDNN backward returns without calling cuDNN.
  if (!(pin_data || pin_filter) || !is_cudnn_float_type(input.scalar_type()) ||
      input.numel() == 0 || grad_output.numel() == 0 || weight.numel() == 0 ||
      !stock_runs_cudnn(input, weight, bias_sizes, stride, padding, dilation, transposed,
                        output_padding, groups)) {
    return stock(output_mask);
  }
  const c10::cuda::CUDAGuard device_guard(input.device());
  auto& context = at::globalContext();
  const bool deterministic = context.deterministicCuDNN() || context.deterministicAlgorithms();
  const bool allow_tf32 = context.allowTF32CuDNN(at::Float32Op::CONV);

  // 1-d convolutions run as the 2-d problem [N, C, 1, L], as ATen does.
  const bool is_1d = input.dim() == 3;
  const at::Tensor in = is_1d ? input.contiguous().unsqueeze(2) : input;
  const at::Tensor go = is_1d ? grad_output.unsqueeze(2) : grad_output;
  const at::Tensor w = is_1d ? weight.unsqueeze(2) : weight;
  const auto pad = is_1d ? as_2d(0, padding) : c10::DimVector(padding.begin(), padding.end());
  const auto str = is_1d ? as_2d(1, stride) : c10::DimVector(stride.begin(), stride.end());
  const auto dil = is_1d ? as_2d(1, dilation) : c10::DimVector(dilation.begin(), dilation.end());
  const auto out_pad = is_1d ? as_2d(0, output_padding)
                             : c10::DimVector(output_padding.begin(), output_padding.end());

  // The layouts stock gives the gradients: its cuDNN backward moves input to the
  // backend layout when the weight gradient needs it, then grad_output to input's.
  const auto dtype = in.scalar_type();
  const int64_t dim = in.dim();
  const auto input_format = output_mask[1] ? stock_conv_memory_format(in, w)
                                           : in.suggest_memory_format();
  const auto data_format =
      stock_conv_memory_format(dtype, dim, input_format, w.suggest_memory_format());
  const auto filter_format = stock_conv_memory_format(dtype, dim, input_format, input_format);

  // The cuDNN problem x (*) w = y: x is the input of an ordinary convolution and
  // the output (grad_output's side) of a transposed one.
  const at::Tensor& x = transposed ? go : in;
  const at::Tensor& y = transposed ? in : go;
  const ConvProblem problem{x.sizes(), w.sizes(), pad, str, dil, groups, transposed, out_pad};
  const auto key_for = [&](Direction direction, at::MemoryFormat format) {
    return make_conv_key(direction, kNoChoice, problem, dtype, in.device(), deterministic,
                         allow_tf32, format);
  };

  at::Tensor grad_input, grad_weight, grad_bias;
  if (pin_data) {
    if (const auto plan = select_plan(key_for(data_direction, data_format))) {
      // Forward (transposed) takes (x = grad_output, w); backward-data (dy, w): same operands.
      grad_input = at::empty(in.sizes(), in.options().memory_format(data_format));
      plan->run(as_canonical(go, data_format), as_canonical(w, data_format), grad_input);
      if (is_1d) grad_input = grad_input.squeeze(2);
    }
  }
  if (pin_filter) {
    if (const auto plan = select_plan(key_for(Direction::kBackwardFilter, filter_format))) {
      grad_weight = at::empty(w.sizes(), w.options().memory_format(filter_format));
      plan->run(as_canonical(x, filter_format), as_canonical(y, filter_format), grad_weight);
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
