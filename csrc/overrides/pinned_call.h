// The shared tail of the single-call overrides (cudnn_convolution and
// cudnn_convolution_transpose): select the runner (pinned, policy-picked, or none),
// allocate what its cuDNN call writes and run it on (input, weight), or hand
// the call to ATen.
#pragma once

#include "base/conv_key.h"
#include "base/cudnn_handle.h"
#include "run/runner.h"
#include "decide/selection.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/accumulate.h>

namespace torch_cudnn_algo {

// `output_sizes` are those of the tensor the call writes: y for a forward call,
// x for a transposed convolution's backward-data call. Empty outputs and inputs
// never reach cuDNN. `stock` runs ATen's kernel when no runner is selected.
template <typename Stock>
at::Tensor run_pinned_call(const ConvKey& key, at::IntArrayRef output_sizes,
                           const at::Tensor& input, const at::Tensor& weight, Stock&& stock) {
  const at::MemoryFormat format = key.format();
  const auto options = input.options().memory_format(format);
  if (c10::multiply_integers(output_sizes) == 0) {
    return at::empty(output_sizes, options);  // nothing to compute: no cuDNN call, as stock
  }
  if (input.numel() == 0) {
    return at::zeros(output_sizes, options);  // zero input channels: every output is an empty sum
  }
  const SelectedRunner selected = select_runner(key);
  if (!selected) {
    return stock();
  }
  at::Tensor output = allocate_output(output_sizes, options);
  selected.run(as_canonical(input, format), as_canonical(weight, format), output);
  return output;
}

}  // namespace torch_cudnn_algo
