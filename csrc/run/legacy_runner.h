// Runs cuDNN's legacy convolution API (cudnnConvolutionForward and friends) with
// a pinned algorithm: one LegacyRunner per ConvKey holds the descriptors and the
// workspace size cuDNN reported for that exact algorithm.
#pragma once

#include "run/runner.h"

#include <memory>
#include <optional>

namespace torch_cudnn_algo {

// The runner for `key` (key.algo is the legacy algorithm), built on first use:
// descriptors and workspace query, nothing executed. `*created` is true for
// exactly one caller per key. Must run with `key.device` current.
std::shared_ptr<const Runner> get_legacy_runner(const ConvKey& key, bool* created);

// Workspace cuDNN asks for to run `key.algo` on the problem, or nullopt when cuDNN
// does not support it there. Nothing is executed and nothing is cached.
std::optional<size_t> legacy_workspace_size(const ConvKey& key);

// Forgets every legacy runner.
void clear_legacy_runners();
size_t legacy_runner_count();

}  // namespace torch_cudnn_algo
