#include "decide/selection.h"

#include "base/cudnn_handle.h"
#include "base/legacy_algorithms.h"
#include "base/python_bridge.h"
#include "decide/config_recording.h"
#include "decide/plan.h"
#include "decide/profiling.h"
#include "run/direct_runner.h"
#include "run/engine_enumeration.h"
#include "run/graph_runner_source.h"
#include "run/legacy_runner.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

namespace torch_cudnn_algo {
namespace {

// Relaxed counters: one uncontended-in-practice increment per pinned call.
std::array<std::atomic<int64_t>, kNumDirections> g_run_counts{};

std::string asked_text(const Runner& runner, const Choice& choice) {
  const std::string value = choice.is_engine() || choice.is_kernel() ? choice.python_literal(runner.key.dir())
                                                                    : runner.choice;
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
  // A kernel of ours that cannot run a convolution points at cuDNN's engines.
  const char* kind = choice.is_engine() || choice.is_kernel() ? "Engine configurations" : "Legacy algorithms";
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
  if (choice.is_engine() || choice.is_kernel()) {
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
  if (fits_workspace_limit(runner.workspace_bytes)) return true;
  const int64_t limit = workspace_limit();
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
  const uint64_t epoch = selection_epoch();
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

bool direction_active(Direction direction) {
  return profile_mode() || plan_covers(direction) || config_recording() ||
         pinned_choice(direction) != nullptr;
}

std::shared_ptr<const Runner> runner_for_choice(const Choice& choice, ConvKey key) {
  TORCH_INTERNAL_ASSERT(!choice.fastest, "a policy has no runner of its own");
  bool created = false;
  if (choice.is_kernel()) {
    key.algo = kNoChoice;
    return get_direct_runner(key, &created);
  }
  if (choice.is_engine()) {
    key.algo = kNoChoice;
    return get_graph_runner(key, *choice.engine, &created, plan_execution_plans());
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
