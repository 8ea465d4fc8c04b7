// The CUDA kernel of aten::cudnn_convolution while conv_fwd_algo is pinned: runs
// the pinned legacy algorithm, or hands the call to ATen's own kernel
// (at::native::cudnn_convolution) for anything it does not handle.
#include "base/conv_key.h"
#include "decide/selection.h"
#include "overrides/overrides.h"
#include "overrides/pinned_call.h"

#include <ATen/ops/cudnn_convolution_native.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace torch_cudnn_algo {
namespace {

at::Tensor cudnn_convolution_override(const at::Tensor& input, const at::Tensor& weight,
                                      at::IntArrayRef padding, at::IntArrayRef stride,
                                      at::IntArrayRef dilation, int64_t groups, bool benchmark,
                                      bool deterministic, bool allow_tf32) {
  // Before anything else: ATen's kernel divides by these lists' contents and
  // crashes the process on a wrong length.
  check_conv_arguments(input, weight, padding, stride, dilation, groups);
  const auto stock = [&] {
    return at::native::cudnn_convolution(input, weight, padding, stride, dilation, groups,
                                         benchmark, deterministic, allow_tf32);
  };
  const c10::cuda::CUDAGuard device_guard(input.device());
  if (!direction_active(Direction::kForward) || !is_cudnn_float_type(input.scalar_type())) {
    return stock();  // unpinned meanwhile, or a dtype ATen rejects with its own message
  }
  if (input.dim() == 3) {
    // A direct 1-d call: run it as the 2-d problem [N, C, 1, L], as ATen does.
    const std::array<int64_t, 2> padding2d{0, padding[0]}, stride2d{1, stride[0]},
        dilation2d{1, dilation[0]};
    return cudnn_convolution_override(input.unsqueeze(2), weight.unsqueeze(2), padding2d,
                                      stride2d, dilation2d, groups, benchmark, deterministic,
                                      allow_tf32)
        .squeeze(2)
        .contiguous();
  }

  const at::MemoryFormat format = stock_conv_memory_format(input, weight);
  const ConvProblem problem{input.sizes(), weight.sizes(), padding, stride, dilation, groups};
  const ConvKey key = make_conv_key(Direction::kForward, kNoChoice, problem, input.scalar_type(),
                                    input.device(), deterministic, allow_tf32, format);
  return run_pinned_call(key, key.output(), input, weight, stock);
}

}  // namespace

void register_forward_override(torch::Library& lib) {
  lib.impl("cudnn_convolution", TORCH_FN(cudnn_convolution_override));
}

}  // namespace torch_cudnn_algo
