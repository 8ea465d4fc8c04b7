// What the user pinned per direction (a legacy algorithm or a graph-API engine
// configuration, or nothing) and the strict flag. Reads sit on every
// convolution call and take no lock of ours; writes also (de)register the
// dispatcher overrides so "nothing pinned" is stock PyTorch with no override.
#pragma once

#include "common.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace torch_cudnn_algo {

constexpr int kNoChoice = -1;

struct ConvKey;
struct PlanEntry;
struct Runner;

// One direction's pinned choice: a legacy algorithm, an engine configuration,
// or the "fastest" policy. Immutable once published.
struct Choice {
  int legacy_algo = kNoChoice;  // legacy enum value, or kNoChoice
  std::string engine;           // engine configuration name ("eng62", "eng62_k2=1_k13=1"), or ""
  bool fastest = false;         // the "fastest" policy: profile once per configuration
  // Where the choice comes from when it is not a flag ("the plan entry '...'"),
  // for messages; empty for a flag.
  std::string origin;

  bool is_engine() const { return !engine.empty(); }
  // As the flag would be assigned in Python: "1  # IMPLICIT_PRECOMP_GEMM" or "'eng62'".
  std::string python_literal(Direction direction) const;
};

// A flag value as the profiler names a candidate ("1" or an engine name).
std::shared_ptr<const Choice> choice_from_flag_value(const std::string& value);

// The pinned choice of `direction`, or nullptr.
std::shared_ptr<const Choice> pinned_choice(Direction direction);

// Pins a legacy algorithm (kNoChoice clears). Out-of-range or unimplemented
// values raise ValueError and change nothing.
void set_pinned_legacy_algo(Direction direction, int algo);

// Raises ValueError unless `algo` is a legacy algorithm of `direction` that
// cuDNN implements.
void check_legacy_algo(Direction direction, int algo);

// Pins an engine configuration by name ("" clears); a malformed name raises
// ValueError and changes nothing.
void set_pinned_engine(Direction direction, const std::string& name);

// Pins a policy; "fastest" is the only one. Anything else raises ValueError.
void set_pinned_policy(Direction direction, const std::string& policy);

bool strict_mode();
void set_strict_mode(bool strict);

// conv_workspace_limit in bytes, -1 for none. Changing it forgets the policy's
// decisions (they were made under the old limit).
int64_t workspace_limit();
void set_workspace_limit(int64_t bytes);

// conv_profile: profile (and log the table of) each new configuration.
bool profile_mode();
void set_profile_mode(bool enabled);

// While alive, this thread's convolutions take the stock path and are never
// profiled: the profiler's own reference and stock timings run under it.
class BypassGuard {
 public:
  explicit BypassGuard(bool bypass = true);
  ~BypassGuard();
  BypassGuard(const BypassGuard&) = delete;
  BypassGuard& operator=(const BypassGuard&) = delete;

 private:
  bool previous_;
};
bool bypassed();
// Sets this thread's bypass (for the Python profiler); returns the previous value.
bool exchange_bypass(bool bypass);

// Whether the overrides must see `direction`'s calls: something is pinned for
// it, the plan in use has entries in it, conv_profile is on, or tune() is
// recording the configurations a model runs.
bool direction_active(Direction direction);

// (De)registers the overrides to match a change made outside the flags (a plan
// put in force, recording) and forgets every thread's selections.
void refresh_overrides();

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

// Forgets every thread's memo of select_runner's outcomes (see select_runner): called
// by every change that can alter one (choices, strict, limit, profile mode,
// decisions and runner caches cleared).
void invalidate_selections();

// Per direction, how many calls ran a pinned or policy-picked runner through the
// overrides since the process started: what tests use to tell "our algorithm
// ran" from "PyTorch never sent this convolution to cuDNN".
std::array<int64_t, kNumDirections> pinned_run_counts();

// The runner running `choice` on `key`'s problem with no rule applied (refused
// runners included): what the profiler times. Must run with key.device current.
std::shared_ptr<const Runner> runner_for_choice(const Choice& choice, ConvKey key);

}  // namespace torch_cudnn_algo
