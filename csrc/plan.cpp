#include "plan.h"

#include <array>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace torch_cudnn_algo {
namespace {

// The key a plan entry matches on: the call's key without device, settings or
// algorithm (see plan.h).
ConvKey entry_key(ConvKey key) {
  key.device = 0;
  key.deterministic = false;
  key.allow_tf32 = false;
  key.algo = kNoChoice;
  return key;
}

struct PlanEntries {
  std::unordered_map<ConvKey, std::shared_ptr<const PlanEntry>, ConvKeyHash> by_key;
  std::vector<ConvKey> order;  // staging order, for listing
};

// Read with std::atomic_load: a published PlanEntries is immutable.
std::shared_ptr<const PlanEntries> g_in_force;
std::array<std::atomic<bool>, kNumDirections> g_covers{};
std::atomic<uint64_t> g_generation{0};
// Staging runs under the GIL, but nothing here relies on that.
std::mutex g_stage_mutex;
PlanEntries g_staged;

std::atomic<bool> g_recording{false};
std::mutex g_record_mutex;
std::unordered_set<ConvKey, ConvKeyHash> g_recorded_keys;
std::vector<std::string> g_recorded;

void publish(std::shared_ptr<const PlanEntries> choices) {
  std::array<bool, kNumDirections> covers{};
  if (choices) {
    for (const auto& key : choices->order) covers[static_cast<int>(key.dir())] = true;
  }
  std::atomic_store(&g_in_force, std::move(choices));
  g_generation.fetch_add(1);
  for (int i = 0; i < kNumDirections; ++i) g_covers[i].store(covers[i]);
}

}  // namespace

void stage_plan_entry(const ConvKey& key, const std::string& value, const std::string& label,
                         std::shared_ptr<const SerializedExecutionPlan> blob) {
  auto entry = std::make_shared<PlanEntry>();
  entry->label = label;
  if (!value.empty()) {
    auto choice = std::make_shared<Choice>(*choice_from_flag_value(value));  // validates names
    if (!choice->is_engine()) check_legacy_algo(key.dir(), choice->legacy_algo);
    choice->origin = "the plan entry '" + label + "'";
    entry->choice = std::move(choice);
  }
  if (blob) {
    TORCH_CHECK_VALUE(entry->choice && entry->choice->is_engine(), "torch_cudnn_algo: the plan entry '",
                      label, "' carries a built execution plan but its choice is no engine "
                      "configuration");
    check_serialized_execution_plan(*blob);
    entry->execution_plan = std::move(blob);
  }
  const ConvKey normalized = entry_key(key);
  std::lock_guard<std::mutex> lock(g_stage_mutex);
  if (g_staged.by_key.insert_or_assign(normalized, std::move(entry)).second) {
    g_staged.order.push_back(normalized);
  }
}

void commit_plan() {
  std::shared_ptr<const PlanEntries> staged;
  {
    std::lock_guard<std::mutex> lock(g_stage_mutex);
    if (!g_staged.order.empty()) staged = std::make_shared<const PlanEntries>(std::move(g_staged));
    g_staged = PlanEntries{};
  }
  auto previous = std::atomic_load(&g_in_force);
  publish(staged);
  try {
    refresh_overrides();
  } catch (...) {
    publish(std::move(previous));
    refresh_overrides();
    throw;
  }
}

void discard_staged_plan() {
  std::lock_guard<std::mutex> lock(g_stage_mutex);
  g_staged = PlanEntries{};
}

std::shared_ptr<const PlanEntry> plan_entry_for(const ConvKey& key) {
  const auto choices = std::atomic_load(&g_in_force);
  if (!choices) return nullptr;
  const auto it = choices->by_key.find(entry_key(key));
  return it == choices->by_key.end() ? nullptr : it->second;
}

bool plan_covers(Direction direction) {
  return g_covers[static_cast<int>(direction)].load(std::memory_order_relaxed);
}

uint64_t plan_generation() {
  return g_generation.load();
}

std::vector<std::shared_ptr<const PlanEntry>> plan_entries_in_force() {
  std::vector<std::shared_ptr<const PlanEntry>> entries;
  if (const auto choices = std::atomic_load(&g_in_force)) {
    for (const auto& key : choices->order) entries.push_back(choices->by_key.at(key));
  }
  return entries;
}

void set_config_recording(bool enabled) {
  if (enabled) {
    std::lock_guard<std::mutex> lock(g_record_mutex);
    g_recorded_keys.clear();
    g_recorded.clear();
  }
  g_recording.store(enabled);
  refresh_overrides();  // recording needs every direction's calls
}

bool config_recording() {
  return g_recording.load(std::memory_order_relaxed);
}

void record_config(const ConvKey& key) {
  ConvKey recorded = key;
  recorded.algo = kNoChoice;
  std::lock_guard<std::mutex> lock(g_record_mutex);
  if (g_recorded_keys.insert(recorded).second) g_recorded.push_back(python_request(recorded));
}

std::vector<std::string> recorded_configs() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  return g_recorded;
}

}  // namespace torch_cudnn_algo
