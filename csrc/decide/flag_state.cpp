#include "decide/flag_state.h"

#include "base/legacy_algorithms.h"
#include "run/direct_runner.h"
#include "run/engine_name.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <utility>

namespace torch_cudnn_algo {
namespace {

// Read with std::atomic_load: the published Choice is immutable.
std::array<std::shared_ptr<const Choice>, kNumDirections> g_choices;
std::atomic<bool> g_strict{false};
std::atomic<int64_t> g_workspace_limit{-1};
std::atomic<bool> g_profile{false};
thread_local bool t_bypass = false;
// Bumped (after the change) by everything that can alter a select_runner outcome.
std::atomic<uint64_t> g_selection_epoch{0};

}  // namespace

std::shared_ptr<const Choice> pinned_choice(Direction direction) {
  return std::atomic_load(&g_choices[static_cast<int>(direction)]);
}

std::shared_ptr<const Choice> exchange_pinned_choice(Direction direction,
                                                     std::shared_ptr<const Choice> choice) {
  return std::atomic_exchange(&g_choices[static_cast<int>(direction)], std::move(choice));
}

void check_legacy_algo(Direction direction, int algo) {
  TORCH_CHECK_VALUE(algo >= 0 && algo < legacy_algo_count(direction), "torch_cudnn_algo: ",
                    direction_name(direction), " legacy algorithm must be in [0, ",
                    legacy_algo_count(direction), ") or None, got ", algo);
  TORCH_CHECK_VALUE(legacy_algo_is_implemented(direction, algo), "torch_cudnn_algo: ",
                    direction_name(direction), " algorithm ",
                    describe_legacy_algo(direction, algo), " is not implemented by cuDNN");
}

std::shared_ptr<const Choice> legacy_algo_choice(Direction direction, int algo) {
  if (algo == kNoChoice) return nullptr;
  check_legacy_algo(direction, algo);
  auto choice = std::make_shared<Choice>();
  choice->legacy_algo = algo;
  return choice;
}

std::shared_ptr<const Choice> named_choice(const std::string& name) {
  if (name.empty()) return nullptr;
  return choice_from_flag_value(name);  // an engine name (validated) or our kernel's
}

std::shared_ptr<const Choice> policy_choice(const std::string& policy) {
  TORCH_CHECK_VALUE(policy == "fastest", "torch_cudnn_algo: unknown policy '", policy,
                    "'; the only policy is 'fastest'");
  auto choice = std::make_shared<Choice>();
  choice->fastest = true;
  return choice;
}

bool strict_mode() {
  return g_strict.load(std::memory_order_relaxed);
}

void set_strict_mode(bool strict) {
  g_strict.store(strict);
  invalidate_selections();  // refusals memoized as "stock" must raise now
}

std::shared_ptr<const Choice> choice_from_flag_value(const std::string& value) {
  auto choice = std::make_shared<Choice>();
  const bool numeric = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  std::string lower = value;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == kDirectKernelName) {
    choice->kernel = kDirectKernelName;
  } else if (numeric) {
    // Legacy enums are single digits; a longer number is no algorithm (and could overflow).
    TORCH_CHECK_VALUE(value.size() <= 2, "torch_cudnn_algo: ", value,
                      " is not a legacy algorithm number");
    choice->legacy_algo = std::stoi(value);
  } else {
    choice->engine = parse_engine_name(value);
  }
  return choice;
}

int64_t workspace_limit() {
  return g_workspace_limit.load(std::memory_order_relaxed);
}

bool fits_workspace_limit(size_t bytes) {
  const int64_t limit = workspace_limit();
  return limit < 0 || static_cast<int64_t>(bytes) <= limit;
}

int64_t exchange_workspace_limit(int64_t bytes) {
  TORCH_CHECK_VALUE(bytes >= -1, "torch_cudnn_algo: workspace limit must be >= 0 bytes or None");
  return g_workspace_limit.exchange(bytes);
}

bool profile_mode() {
  return g_profile.load(std::memory_order_relaxed);
}

void set_profile_mode(bool enabled) {
  g_profile.store(enabled);
  invalidate_selections();  // configurations memoized before must be profiled now
}

BypassGuard::BypassGuard(bool bypass) : previous_(t_bypass) {
  t_bypass = bypass;
}

BypassGuard::~BypassGuard() {
  t_bypass = previous_;
}

bool bypassed() {
  return t_bypass;
}

bool exchange_bypass(bool bypass) {
  return std::exchange(t_bypass, bypass);
}

void invalidate_selections() {
  g_selection_epoch.fetch_add(1, std::memory_order_acq_rel);
}

uint64_t selection_epoch() {
  return g_selection_epoch.load(std::memory_order_acquire);
}

}  // namespace torch_cudnn_algo
