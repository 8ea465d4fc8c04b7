// Which runner runs a call: the plan in use's entry for the configuration,
// else the direction's pinned choice or the "fastest" policy's pick, with the
// contract applied on the way (refusals, the workspace limit, the workspace
// the allocator can supply). Each thread memoizes the outcome per
// configuration.
#pragma once

#include "base/common.h"
#include "decide/flag_state.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <array>
#include <cstdint>
#include <memory>

namespace torch_cudnn_algo {

struct ConvKey;
struct PlanEntry;
struct Runner;

// Whether the overrides must see `direction`'s calls: something is pinned for
// it, the plan in use has entries in it, conv_profile is on, or tune() is
// recording the configurations a model runs.
bool direction_active(Direction direction);

// A runner chosen for one call, with its workspace already allocated (exactly the
// bytes cuDNN reported): nothing can fail for lack of memory once it runs.
// Empty (false) means the stock path runs.
struct SelectedRunner {
  std::shared_ptr<const Runner> runner;
  c10::DataPtr workspace;
  const PlanEntry* entry = nullptr;  // the plan entry it runs for, counted per run

  explicit operator bool() const { return runner != nullptr; }
  // Runs the runner (see Runner::run) and counts the call in pinned_run_counts().
  void run(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) const;
};

// The runner to run for `key`'s problem in key.dir(), or an empty SelectedRunner for
// the stock path. The plan in use's entry for the configuration wins over the
// direction's flag. Applies the contract on the way: profiles a new configuration
// when conv_profile or the "fastest" policy asks for it (never during CUDA graph
// capture); the first run of a pinned runner logs "requested <dir> algorithm
// <choice> is set"; a refusal (unsupported, a determinism/TF32 rule, over the
// workspace limit, a workspace the allocator cannot supply) raises (strict, with
// the parameters and a Python repro) or warns once per configuration, and the
// caller then runs the stock path. Each thread memoizes the outcome per
// configuration once it is final, so later calls cost one hash lookup: no lock,
// no re-selection, no allocation but the workspace.
SelectedRunner select_runner(ConvKey key);

// Per direction, how many calls ran a pinned or policy-picked runner through the
// overrides since the process started: what tests use to tell "our algorithm
// ran" from "PyTorch never sent this convolution to cuDNN".
std::array<int64_t, kNumDirections> pinned_run_counts();

// The runner running `choice` on `key`'s problem with no rule applied (refused
// runners included): what the profiler times. Must run with key.device current.
std::shared_ptr<const Runner> runner_for_choice(const Choice& choice, ConvKey key);

}  // namespace torch_cudnn_algo
