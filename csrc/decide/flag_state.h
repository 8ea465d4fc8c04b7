// The flag state: what the user pinned per direction (a legacy algorithm, a
// graph-API engine configuration, the "fastest" policy, or nothing), strict,
// the workspace limit, conv_profile, this thread's bypass, and the selection
// epoch every change of them bumps. Reads sit on every convolution call and
// take no lock of ours. Registering the overrides that a change needs is the
// overrides layer's (see overrides/overrides.h).
#pragma once

#include "decide/choice.h"

#include <cstdint>
#include <memory>
#include <string>

namespace torch_cudnn_algo {

// A flag value as the profiler names a candidate ("1" or an engine name).
std::shared_ptr<const Choice> choice_from_flag_value(const std::string& value);

// The pinned choice of `direction`, or nullptr.
std::shared_ptr<const Choice> pinned_choice(Direction direction);

// Publishes `choice` (nullptr: nothing pinned) for `direction`; returns the
// previous one. Forgets no selection: the caller does (invalidate_selections).
std::shared_ptr<const Choice> exchange_pinned_choice(Direction direction,
                                                     std::shared_ptr<const Choice> choice);

// The choice pinning legacy algorithm `algo` (nullptr for kNoChoice).
// Out-of-range or unimplemented values raise ValueError.
std::shared_ptr<const Choice> legacy_algo_choice(Direction direction, int algo);

// Raises ValueError unless `algo` is a legacy algorithm of `direction` that
// cuDNN implements.
void check_legacy_algo(Direction direction, int algo);

// The choice pinning an engine configuration or one of our kernels by name
// (nullptr for ""); a malformed name raises ValueError.
std::shared_ptr<const Choice> named_choice(const std::string& name);

// The choice pinning a policy; "fastest" is the only one. Anything else raises ValueError.
std::shared_ptr<const Choice> policy_choice(const std::string& policy);

bool strict_mode();
void set_strict_mode(bool strict);

// conv_workspace_limit in bytes, -1 for none.
int64_t workspace_limit();
// Whether `bytes` of workspace are within conv_workspace_limit.
bool fits_workspace_limit(size_t bytes);
// Sets it (ValueError below -1) and returns the previous limit. A changed limit
// makes the policy's decisions stale: the caller forgets them.
int64_t exchange_workspace_limit(int64_t bytes);

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

// Forgets every thread's memo of select_runner's outcomes (see select_runner):
// called by every change that can alter one (choices, strict, limit, profile
// mode, decisions and runner caches cleared).
void invalidate_selections();
// Bumped (after the change) by invalidate_selections.
uint64_t selection_epoch();

}  // namespace torch_cudnn_algo
