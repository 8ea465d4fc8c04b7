// The flags' operators: what is pinned per direction (legacy algorithm,
// engine configuration, policy), strict, the workspace limit, conv_profile,
// conv_knob_search and this thread's bypass; the names they take; the
// overrides registered. Setting a flag brings the overrides in line.
#include "base/common.h"
#include "base/legacy_algorithms.h"
#include "decide/flag_state.h"
#include "decide/profiling.h"
#include "decide/tuner/fastest_tuner.h"
#include "overrides/overrides.h"
#include "run/engine_name.h"

#include <torch/library.h>

namespace torch_cudnn_algo {
namespace {

void set_legacy_algo(const std::string& direction, int64_t algo) {
  TORCH_CHECK_VALUE(algo >= kNoChoice && algo < 1024, "torch_cudnn_algo: algorithm ", algo,
                    " is out of range");
  const Direction dir = parse_direction(direction);
  pin_choice(dir, legacy_algo_choice(dir, static_cast<int>(algo)));
}

int64_t get_legacy_algo(const std::string& direction) {
  const auto choice = pinned_choice(parse_direction(direction));
  return choice ? choice->legacy_algo : kNoChoice;
}

void set_engine(const std::string& direction, const std::string& name) {
  const Direction dir = parse_direction(direction);
  pin_choice(dir, named_choice(name));
}

std::string get_engine(const std::string& direction) {
  const auto choice = pinned_choice(parse_direction(direction));
  if (!choice) return "";
  if (choice->is_kernel()) return choice->kernel;
  return choice->is_engine() ? choice->engine->canonical : "";
}

// The canonical form of an engine configuration name (ValueError if malformed).
std::string canonical_engine_name(const std::string& name) {
  return parse_engine_name(name).canonical;
}

void set_policy(const std::string& direction, const std::string& policy) {
  const Direction dir = parse_direction(direction);
  pin_choice(dir, policy_choice(policy));
}

std::string get_policy(const std::string& direction) {
  const auto choice = pinned_choice(parse_direction(direction));
  return choice && choice->fastest ? "fastest" : "";
}

void set_workspace_limit_op(int64_t bytes) {
  if (exchange_workspace_limit(bytes) != bytes) {
    clear_profile_decisions();  // the policy's picks were made under the old limit
  }
  invalidate_selections();
}

int64_t get_workspace_limit() {
  return workspace_limit();
}

void set_profile(bool enabled) {
  set_profile_mode(enabled);
  resync_overrides();
}

bool get_profile() {
  return profile_mode();
}

bool set_thread_bypass(bool bypass) {
  return exchange_bypass(bypass);
}

void set_knob_search_op(bool enabled) {
  if (exchange_knob_search(enabled) != enabled) {
    clear_profile_decisions();  // decisions were made with the other search
  }
}

bool get_knob_search() {
  return knob_search_enabled();
}

void set_strict(bool strict) {
  set_strict_mode(strict);
}

bool get_strict() {
  return strict_mode();
}

std::vector<std::string> get_legacy_algo_names(const std::string& direction) {
  return legacy_algo_names(parse_direction(direction));
}

std::vector<std::string> get_active_overrides() {
  return registered_override_names();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_cudnn_algo, m) {
  m.def("set_legacy_algo(str direction, int algo) -> ()", &set_legacy_algo);
  m.def("get_legacy_algo(str direction) -> int", &get_legacy_algo);
  m.def("set_engine(str direction, str name) -> ()", &set_engine);
  m.def("get_engine(str direction) -> str", &get_engine);
  m.def("canonical_engine_name(str name) -> str", &canonical_engine_name);
  m.def("set_strict(bool strict) -> ()", &set_strict);
  m.def("get_strict() -> bool", &get_strict);
  m.def("legacy_algo_names(str direction) -> str[]", &get_legacy_algo_names);
  m.def("active_overrides() -> str[]", &get_active_overrides);
  m.def("set_policy(str direction, str policy) -> ()", &set_policy);
  m.def("get_policy(str direction) -> str", &get_policy);
  m.def("set_workspace_limit(int bytes) -> ()", &set_workspace_limit_op);
  m.def("get_workspace_limit() -> int", &get_workspace_limit);
  m.def("set_profile(bool enabled) -> ()", &set_profile);
  m.def("get_profile() -> bool", &get_profile);
  m.def("set_thread_bypass(bool bypass) -> bool", &set_thread_bypass);
  m.def("set_knob_search(bool enabled) -> ()", &set_knob_search_op);
  m.def("get_knob_search() -> bool", &get_knob_search);
}

}  // namespace torch_cudnn_algo
