// Runs cuDNN's legacy convolution API (cudnnConvolutionForward and friends) with
// a pinned algorithm. One LegacyPlan per ConvKey holds the descriptors and the
// workspace size cuDNN reported for that exact algorithm; plans are built once
// and shared (immutable) by every thread, the autograd thread included.
#pragma once

#include "conv_key.h"

#include <ATen/cudnn/Descriptors.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

struct LegacyPlan {
  ConvKey key;
  at::native::TensorDescriptor x_desc;  // cuDNN forward input  (dx for bwd-data)
  at::native::FilterDescriptor w_desc;  // filter               (dw for bwd-filter)
  at::native::TensorDescriptor y_desc;  // cuDNN forward output (dy for backward)
  at::native::ConvolutionDescriptor conv_desc;
  size_t workspace_bytes = 0;
  // Why the pinned algorithm cannot run this problem; empty when it can.
  std::string refusal;
  // On refusal: the algorithms of this direction that could run it instead.
  std::vector<int> runnable_algos;
  // Set by the first refusal warning, so each configuration warns once.
  mutable std::atomic<bool> warned{false};
};

// The plan for `key`, built (descriptors + workspace query, nothing executed) on
// first use. `*created` is true for exactly one caller per key: the one that
// should announce it. Must run with `key.device` current.
std::shared_ptr<const LegacyPlan> get_legacy_plan(const ConvKey& key, bool* created);

// Forgets every plan (so first-use logs and warnings fire again).
void clear_legacy_plans();

size_t legacy_plan_count();

// Workspace cuDNN asks for to run `key.algo` on the problem, or nullopt when cuDNN
// does not support it there. Nothing is executed and nothing is cached.
std::optional<size_t> legacy_workspace_size(const ConvKey& key);

// Executes a runnable plan on the current stream. Tensors are canonical in the
// plan's memory format; the workspace comes from torch's caching allocator and is
// exactly the size cuDNN reported for this algorithm.
void run_legacy_forward(const LegacyPlan& plan, const at::Tensor& x, const at::Tensor& w,
                        const at::Tensor& y);
void run_legacy_backward_data(const LegacyPlan& plan, const at::Tensor& dy, const at::Tensor& w,
                              const at::Tensor& dx);
void run_legacy_backward_filter(const LegacyPlan& plan, const at::Tensor& x,
                                const at::Tensor& dy, const at::Tensor& dw);

}  // namespace torch_cudnn_algo
