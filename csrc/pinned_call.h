// The shared tail of the single-call overrides (cudnn_convolution and
// cudnn_convolution_transpose): allocate what the pinned cuDNN call writes, run
// the pinned plan on (input, weight), or hand the call to ATen.
#pragma once

#include "conv_key.h"
#include "plan.h"
#include "selection.h"

#include <ATen/ops/empty.h>

namespace torch_cudnn_algo {

// `output_sizes` are those of the tensor the call writes: y for a forward call,
// x for a transposed convolution's backward-data call. Empty outputs and inputs
// never reach cuDNN. `stock` runs ATen's kernel when the pinned choice cannot.
template <typename Stock>
at::Tensor run_pinned_call(const Choice& choice, const ConvKey& key, at::IntArrayRef output_sizes,
                           const at::Tensor& input, const at::Tensor& weight, Stock&& stock) {
  const at::MemoryFormat format = key.format();
  at::Tensor output = at::empty(output_sizes, input.options().memory_format(format));
  if (output.numel() == 0) {
    return output;  // nothing to compute: no cuDNN call, as stock
  }
  if (input.numel() == 0) {
    return output.zero_();  // zero input channels: every output is an empty sum
  }
  const auto plan = runnable_pinned_plan(choice, key);
  if (!plan) {
    return stock();
  }
  plan->run(as_canonical(input, format), as_canonical(weight, format), output);
  return output;
}

}  // namespace torch_cudnn_algo
