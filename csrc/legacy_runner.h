// Runs cuDNN's legacy convolution API (cudnnConvolutionForward and friends) with
// a pinned algorithm: one LegacyPlan per ConvKey holds the descriptors and the
// workspace size cuDNN reported for that exact algorithm.
#pragma once

#include "plan.h"

#include <memory>
#include <optional>

namespace torch_cudnn_algo {

// The plan for `key` (key.algo is the legacy algorithm), built on first use:
// descriptors and workspace query, nothing executed. `*created` is true for
// exactly one caller per key. Must run with `key.device` current.
std::shared_ptr<const Plan> get_legacy_plan(const ConvKey& key, bool* created);

// Workspace cuDNN asks for to run `key.algo` on the problem, or nullopt when cuDNN
// does not support it there. Nothing is executed and nothing is cached.
std::optional<size_t> legacy_workspace_size(const ConvKey& key);

// Forgets every legacy plan.
void clear_legacy_plans();
size_t legacy_plan_count();

}  // namespace torch_cudnn_algo
