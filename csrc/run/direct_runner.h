// Runs our own direct convolution kernels (kernels/direct_conv.h) as a Runner:
// the candidate "tca.direct", beside cuDNN's legacy algorithms and engine
// configurations. Nothing is built or compiled: the kernels are in the library.
#pragma once

#include "run/runner.h"

#include <memory>

namespace torch_cudnn_algo {

// Whether this build has the kernels (every build but one made with
// TORCH_CUDNN_ALGO_OWN_KERNELS=0); without them every runner refuses, saying so.
bool own_kernels_built();

// The flag value that names the direct kernels.
constexpr const char* kDirectKernelName = "tca.direct";

// The runner for `key`, made on first use. `*created` is true for exactly one
// caller per key. Must run with `key.device` current.
std::shared_ptr<const Runner> get_direct_runner(const ConvKey& key, bool* created);

void clear_direct_runners();
size_t direct_runner_count();

}  // namespace torch_cudnn_algo
