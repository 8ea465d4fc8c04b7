#include "selection.h"

#include "plan.h"
#include "cudnn_handle.h"
#include "graph_runner.h"
#include "legacy_algorithms.h"
#include "legacy_runner.h"
#include "overrides.h"
#include "profiling.h"
#include "python_bridge.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

namespace torch_cudnn_algo {
namespace {

// Read with std::atomic_load: the published Choice is immutable.
std::array<std::shared_ptr<const Choice>, kNumDirections> g_choices;
std::atomic<bool> g_strict{false};
std::atomic<int64_t> g_workspace_limit{-1};
std::atomic<bool> g_profile{false};
// Relaxed counters: one uncontended-in-practice increment per pinned call.
std::array<std::atomic<int64_t>, kNumDirections> g_run_counts{};
thread_local bool t_bypass = false;
// Bumped (after the change) by everything that can alter a select_runner outcome.
std::atomic<uint64_t> g_selection_epoch{0};
// Serializes writers so the registered overrides always match the last write.
std::mutex g_write_mutex;

void publish(Direction direction, std::shared_ptr<const Choice> choice) {
  std::vector<std::string> log_lines;
  {
    std::lock_guard<std::mutex> lock(g_write_mutex);
    auto& slot = g_choices[static_cast<int>(direction)];
    auto previous = std::atomic_exchange(&slot, std::move(choice));
    try {
      log_lines = sync_overrides();
    } catch (...) {
      std::atomic_store(&slot, std::move(previous));
      invalidate_selections();
      throw;
    }
    invalidate_selections();
  }
  // Logged after unlocking: logging takes the GIL, and a Python thread holding
  // the GIL may be waiting for g_write_mutex.
  for (const auto& line : log_lines) {
    log_to_python(LogLevel::kInfo, line);
  }
}

// Re-syncs the overrides after a change that is not a choice (conv_profile).
void resync_overrides() {
  std::vector<std::string> log_lines;
  {
    std::lock_guard<std::mutex> lock(g_write_mutex);
    log_lines = sync_overrides();
  }
  for (const auto& line : log_lines) {
    log_to_python(LogLevel::kInfo, line);
  }
}

std::string asked_text(const Runner& runner, const Choice& choice) {
  const std::string value = choice.is_engine() ? "'" + choice.engine + "'" : runner.choice;
  if (!choice.origin.empty()) return choice.origin + " (" + value + ")";
  return std::string("torch.backends.cudnn.") + direction_flag_name(runner.key.dir()) + " = " + value;
}

// Raises (strict) or warns once (`first` says whether this is the first time)
// that `choice` cannot run runner.key's problem because of `reason`.
void refuse(const Runner& runner, const Choice& choice, const std::string& reason,
            const std::vector<std::string>& alternatives_list, bool first) {
  const ConvKey& key = runner.key;
  std::string alternatives;
  for (const auto& name : alternatives_list) {
    alternatives += (alternatives.empty() ? "" : ", ") + name;
  }
  if (alternatives.empty()) alternatives = "none";
  const char* kind = choice.is_engine() ? "Engine configurations" : "Legacy algorithms";
  const std::string asked = asked_text(runner, choice);
  if (strict_mode()) {
    TORCH_CHECK(false, "torch_cudnn_algo: ", asked, " cannot run this convolution: ", reason,
                ".\n  convolution: ", describe_conv(key), "\n  ", kind,
                " that can run it: ", alternatives,
                "\n  (conv_algo_strict=True makes this an error; with False the stock path runs "
                "after a warning)\nRepro:\n",
                python_repro(key, choice.python_literal(key.dir()), /*strict=*/true));
  }
  if (first) {
    warn_to_python("torch_cudnn_algo: " + asked + " cannot run this convolution: " + reason +
                   ". " + kind + " that can run it: " + alternatives +
                   ". Running PyTorch's own choice instead (set "
                   "torch.backends.cudnn.conv_algo_strict = True to make this an error). "
                   "Convolution: " + describe_conv(key));
  }
}

// Choices of `choice`'s kind that can run key's problem within `limit` bytes.
std::vector<std::string> alternatives_within_limit(const Choice& choice, const ConvKey& key,
                                                   int64_t limit) {
  std::vector<std::string> names;
  if (choice.is_engine()) {
    for (const auto& candidate : list_engine_candidates(key)) {
      if (candidate.refusal.empty() && candidate.workspace >= 0 && candidate.workspace <= limit) {
        names.push_back(candidate.name);
      }
    }
    return names;
  }
  const Direction direction = key.dir();
  for (int algo = 0; algo < legacy_algo_count(direction); ++algo) {
    if (!legacy_algo_is_implemented(direction, algo)) continue;
    Choice legacy;
    legacy.legacy_algo = algo;
    const auto runner = runner_for_choice(legacy, key);
    if (runner->refusal.empty() && static_cast<int64_t>(runner->workspace_bytes) <= limit) {
      names.push_back(runner->choice);
    }
  }
  return names;
}

void handle_refusal(const Runner& runner, const Choice& choice) {
  const bool first = !strict_mode() && !runner.warned.exchange(true);
  refuse(runner, choice, runner.refusal, runner.alternatives, first);
}

// The workspace limit applied to a runner that cuDNN can run; true when it fits.
bool within_workspace_limit(const Runner& runner, const Choice& choice) {
  const int64_t limit = workspace_limit();
  if (limit < 0 || static_cast<int64_t>(runner.workspace_bytes) <= limit) return true;
  const bool first = !strict_mode() && runner.warned_limit.exchange(limit) != limit;
  if (strict_mode() || first) {
    refuse(runner, choice,
           "it needs " + std::to_string(runner.workspace_bytes) +
               " bytes of workspace, over torch.backends.cudnn.conv_workspace_limit = " +
               std::to_string(limit),
           alternatives_within_limit(choice, runner.key, limit), first);
  }
  return false;
}

// The first line of an allocator error ("CUDA out of memory. Tried to allocate ...").
std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

// The runner's workspace, or nullopt after the refusal rule when the allocator
// cannot supply it: a workspace that does not fit in memory is one more reason a
// choice cannot run, and PyTorch's own choice (which falls back to algorithms
// with less workspace) runs instead of ending the user's program.
std::optional<c10::DataPtr> allocate_or_refuse(const Runner& runner, const Choice& choice) {
  std::string error;
  try {
    return allocate_workspace(runner.workspace_bytes);
  } catch (const c10::OutOfMemoryError& oom) {
    error = first_line(oom.what_without_backtrace());
  }
  const bool first = !strict_mode() && !runner.warned_out_of_memory.exchange(true);
  // Choices needing less workspace are the ones that might fit.
  const int64_t smaller = static_cast<int64_t>(runner.workspace_bytes) - 1;
  refuse(runner, choice,
         "its workspace of " + std::to_string(runner.workspace_bytes) +
             " bytes could not be allocated (out of memory: " + error + ")",
         first || strict_mode() ? alternatives_within_limit(choice, runner.key, smaller)
                                : std::vector<std::string>{},
         first);
  return std::nullopt;
}

// A thread's memo of final select_runner outcomes: the runner to run with the
// choice it came from, or no runner (the stock path, refusals already reported).
struct Selection {
  std::shared_ptr<const Choice> choice;
  std::shared_ptr<const Runner> runner;
  std::shared_ptr<const PlanEntry> entry;  // the plan entry that chose, if any
};

struct SelectionMemo {
  uint64_t epoch = 0;
  std::unordered_map<ConvKey, Selection, ConvKeyHash> outcomes;
};

// Leaked per thread: the memo holds runners, whose cuDNN objects must not be
// destroyed by a thread-exit destructor running after cuDNN unloaded.
SelectionMemo& selection_memo() {
  thread_local SelectionMemo* memo = new SelectionMemo{~uint64_t{0}, {}};
  const uint64_t epoch = g_selection_epoch.load(std::memory_order_acquire);
  if (memo->epoch != epoch) {
    memo->outcomes.clear();
    memo->epoch = epoch;
  }
  return *memo;
}

// The runner with its workspace, or empty after the refusal rule when the
// allocator cannot supply it.
SelectedRunner with_workspace(const Selection& known) {
  auto workspace = allocate_or_refuse(*known.runner, *known.choice);
  if (!workspace) {
    return {};
  }
  return {known.runner, std::move(*workspace), known.entry.get()};
}

// The pinned (or policy-picked) `choice` on `key`: its runner with its workspace if
// it may run, else empty after the refusal rule. `*memo` receives the outcome
// unless it can change on a later call (a workspace that could not be allocated
// now; a strict-mode refusal raises instead).
SelectedRunner runnable_runner(const std::shared_ptr<const Choice>& choice_ptr, const ConvKey& key,
                           bool picked_by_policy, Selection* memo) {
  const Choice& choice = *choice_ptr;
  auto runner = runner_for_choice(choice, key);
  if (!runner->refusal.empty()) {
    handle_refusal(*runner, choice);
    return {};
  }
  if (!within_workspace_limit(*runner, choice)) {
    return {};
  }
  memo->choice = choice_ptr;
  memo->runner = runner;
  auto workspace = allocate_or_refuse(*runner, choice);
  if (!workspace) {
    return {};
  }
  if (!runner->announced.exchange(true)) {
    const char* by = picked_by_policy ? "fastest -> " : choice.origin.empty() ? "" : "plan -> ";
    log_to_python(LogLevel::kInfo, std::string("requested ") + direction_name(key.dir()) +
                                       " algorithm " + by + runner->choice + " is set | " +
                                       describe_conv(key));
  }
  return {std::move(runner), std::move(*workspace), memo->entry.get()};
}

}  // namespace

std::string Choice::python_literal(Direction direction) const {
  if (fastest) return "'fastest'";
  if (is_engine()) return "'" + engine + "'";
  return std::to_string(legacy_algo) + "  # " + legacy_algo_name(direction, legacy_algo);
}

std::shared_ptr<const Choice> pinned_choice(Direction direction) {
  return std::atomic_load(&g_choices[static_cast<int>(direction)]);
}

void check_legacy_algo(Direction direction, int algo) {
  TORCH_CHECK_VALUE(algo >= 0 && algo < legacy_algo_count(direction), "torch_cudnn_algo: ",
                    direction_name(direction), " legacy algorithm must be in [0, ",
                    legacy_algo_count(direction), ") or None, got ", algo);
  TORCH_CHECK_VALUE(legacy_algo_is_implemented(direction, algo), "torch_cudnn_algo: ",
                    direction_name(direction), " algorithm ",
                    describe_legacy_algo(direction, algo), " is not implemented by cuDNN");
}

void set_pinned_legacy_algo(Direction direction, int algo) {
  if (algo == kNoChoice) {
    publish(direction, nullptr);
    return;
  }
  check_legacy_algo(direction, algo);
  auto choice = std::make_shared<Choice>();
  choice->legacy_algo = algo;
  publish(direction, std::move(choice));
}

void set_pinned_engine(Direction direction, const std::string& name) {
  if (name.empty()) {
    publish(direction, nullptr);
    return;
  }
  auto choice = std::make_shared<Choice>();
  choice->engine = parse_engine_name(name).canonical;  // validates
  publish(direction, std::move(choice));
}

bool strict_mode() {
  return g_strict.load(std::memory_order_relaxed);
}

void set_strict_mode(bool strict) {
  g_strict.store(strict);
  invalidate_selections();  // refusals memoized as "stock" must raise now
}

void set_pinned_policy(Direction direction, const std::string& policy) {
  TORCH_CHECK_VALUE(policy == "fastest", "torch_cudnn_algo: unknown policy '", policy,
                    "'; the only policy is 'fastest'");
  auto choice = std::make_shared<Choice>();
  choice->fastest = true;
  publish(direction, std::move(choice));
}

std::shared_ptr<const Choice> choice_from_flag_value(const std::string& value) {
  auto choice = std::make_shared<Choice>();
  const bool numeric = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  if (numeric) {
    // Legacy enums are single digits; a longer number is no algorithm (and could overflow).
    TORCH_CHECK_VALUE(value.size() <= 2, "torch_cudnn_algo: ", value,
                      " is not a legacy algorithm number");
    choice->legacy_algo = std::stoi(value);
  } else {
    choice->engine = parse_engine_name(value).canonical;
  }
  return choice;
}

int64_t workspace_limit() {
  return g_workspace_limit.load(std::memory_order_relaxed);
}

void set_workspace_limit(int64_t bytes) {
  TORCH_CHECK_VALUE(bytes >= -1, "torch_cudnn_algo: workspace limit must be >= 0 bytes or None");
  if (g_workspace_limit.exchange(bytes) != bytes) {
    clear_profile_decisions();  // the policy's picks were made under the old limit
  }
  invalidate_selections();
}

bool profile_mode() {
  return g_profile.load(std::memory_order_relaxed);
}

void set_profile_mode(bool enabled) {
  g_profile.store(enabled);
  invalidate_selections();  // configurations memoized before must be profiled now
  resync_overrides();
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

bool direction_active(Direction direction) {
  return profile_mode() || plan_covers(direction) || config_recording() ||
         pinned_choice(direction) != nullptr;
}

void refresh_overrides() {
  resync_overrides();
  invalidate_selections();
}

std::shared_ptr<const Runner> runner_for_choice(const Choice& choice, ConvKey key) {
  TORCH_INTERNAL_ASSERT(!choice.fastest, "a policy has no runner of its own");
  bool created = false;
  if (choice.is_engine()) {
    key.algo = kNoChoice;
    return get_graph_runner(key, choice.engine, &created);
  }
  key.algo = choice.legacy_algo;
  return get_legacy_runner(key, &created);
}

void SelectedRunner::run(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) const {
  TORCH_INTERNAL_ASSERT(runner != nullptr);
  runner->run(a, b, out, workspace.get());
  g_run_counts[static_cast<int>(runner->key.dir())].fetch_add(1, std::memory_order_relaxed);
  if (entry != nullptr) entry->runs.fetch_add(1, std::memory_order_relaxed);
}

std::array<int64_t, kNumDirections> pinned_run_counts() {
  std::array<int64_t, kNumDirections> counts{};
  for (int i = 0; i < kNumDirections; ++i) {
    counts[i] = g_run_counts[i].load(std::memory_order_relaxed);
  }
  return counts;
}

void invalidate_selections() {
  g_selection_epoch.fetch_add(1, std::memory_order_acq_rel);
}

SelectedRunner select_runner(ConvKey key) {
  if (bypassed()) {
    return {};
  }
  if (config_recording()) {
    record_config(key);  // tune() collects the configurations a model runs
  }
  SelectionMemo& memo = selection_memo();
  if (const auto it = memo.outcomes.find(key); it != memo.outcomes.end()) {
    const Selection& known = it->second;
    return known.runner ? with_workspace(known) : SelectedRunner{};
  }
  // The plan's entry for this configuration wins over the flag; a null entry
  // choice means the stock path.
  auto entry = plan_entry_for(key);
  const auto pinned = entry ? entry->choice : pinned_choice(key.dir());
  const bool policy = pinned && pinned->fastest;
  std::shared_ptr<const Choice> choice = pinned;
  bool settled = true;
  if (policy || profile_mode()) {
    auto pick = profiled_choice(key, &settled);
    if (policy) choice = std::move(pick);
  }
  if (!choice) {
    if (settled) memo.outcomes.emplace(key, Selection{});
    return {};
  }
  Selection outcome;
  outcome.entry = std::move(entry);
  auto selected = runnable_runner(choice, key, policy, &outcome);
  // A refusal (already reported) is as final as a runnable runner; a workspace
  // the allocator could not supply now is not.
  if (settled && (selected || !outcome.runner)) memo.outcomes.emplace(key, std::move(outcome));
  return selected;
}

}  // namespace torch_cudnn_algo
