// The CUDA kernel of aten::cudnn_convolution_transpose while conv_bwd_data_algo
// is pinned: a transposed convolution's forward *is* cuDNN's backward-data call
// (its output is the cuDNN problem's x), so it runs the pinned backward-data
// algorithm; anything it does not handle goes to ATen's own kernel.
#include "base/conv_key.h"
#include "decide/selection.h"
#include "overrides/overrides.h"
#include "overrides/pinned_call.h"

#include <ATen/ops/cudnn_convolution_transpose_native.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace torch_cudnn_algo {
namespace {

at::Tensor cudnn_convolution_transpose_override(
    const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef padding,
    at::IntArrayRef output_padding, at::IntArrayRef stride, at::IntArrayRef dilation,
    int64_t groups, bool benchmark, bool deterministic, bool allow_tf32) {
  check_transposed_arguments(input, weight, padding, output_padding, stride, dilation, groups);
  const auto stock = [&] {
    return at::native::cudnn_convolution_transpose(input, weight, padding, output_padding, stride,
                                                   dilation, groups, benchmark, deterministic,
                                                   allow_tf32);
  };
  const c10::cuda::CUDAGuard device_guard(input.device());
  if (!direction_active(Direction::kBackwardData) || !is_cudnn_float_type(input.scalar_type())) {
    return stock();
  }
  if (input.dim() == 3) {
    const std::array<int64_t, 2> padding2d{0, padding[0]}, output_padding2d{0, output_padding[0]},
        stride2d{1, stride[0]}, dilation2d{1, dilation[0]};
    return cudnn_convolution_transpose_override(input.unsqueeze(2), weight.unsqueeze(2),
                                                padding2d, output_padding2d, stride2d, dilation2d,
                                                groups, benchmark, deterministic, allow_tf32)
        .squeeze(2)
        .contiguous();
  }

  const at::MemoryFormat format = stock_conv_memory_format(input, weight);
  const auto x_sizes = conv_transpose_output_sizes(input.sizes(), weight.sizes(), padding,
                                                   output_padding, stride, dilation, groups);
  const ConvProblem problem{at::IntArrayRef(x_sizes.data(), input.dim()), weight.sizes(), padding,
                            stride, dilation, groups, /*transposed=*/true, output_padding};
  const ConvKey key = make_conv_key(Direction::kBackwardData, kNoChoice, problem,
                                    input.scalar_type(), input.device(), deterministic,
                                    allow_tf32, format);
  if (key.output() != input.sizes()) {
    // output_padding >= stride (legal when < dilation): no backward-data call of
    // cuDNN maps back onto this input, and F.conv_transpose never sends it here.
    return stock();
  }
  // The transposed output is the cuDNN problem's x.
  return run_pinned_call(key, key.input(), input, weight, stock);
}

}  // namespace

void register_transpose_override(torch::Library& lib) {
  lib.impl("cudnn_convolution_transpose", TORCH_FN(cudnn_convolution_transpose_override));
}

}  // namespace torch_cudnn_algo
