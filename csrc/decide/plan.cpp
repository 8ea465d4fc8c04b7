#include "decide/plan.h"

#include "decide/flag_state.h"

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

}  // namespace

struct PlanEntries {
  std::unordered_map<ConvKey, std::shared_ptr<const PlanEntry>, ConvKeyHash> by_key;
  std::vector<ConvKey> order;  // staging order, for listing
};

namespace {

// Read with std::atomic_load: a published PlanEntries is immutable.
std::shared_ptr<const PlanEntries> g_in_force;
std::array<std::atomic<bool>, kNumDirections> g_covers{};
std::atomic<uint64_t> g_generation{0};
// Staging runs under the GIL, but nothing here relies on that.
std::mutex g_stage_mutex;
PlanEntries g_staged;

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
                      std::shared_ptr<const SerializedExecutionPlan> execution_plan) {
  auto entry = std::make_shared<PlanEntry>();
  entry->label = label;
  if (!value.empty()) {
    auto choice = std::make_shared<Choice>(*choice_from_flag_value(value));  // validates names
    if (!choice->is_engine() && !choice->is_kernel()) check_legacy_algo(key.dir(), choice->legacy_algo);
    choice->origin = "the plan entry '" + label + "'";
    entry->choice = std::move(choice);
  }
  if (execution_plan) {
    TORCH_CHECK_VALUE(entry->choice && entry->choice->is_engine(), "torch_cudnn_algo: the plan entry '",
                      label, "' carries a built execution plan but its choice is no engine "
                      "configuration");
    check_serialized_execution_plan(*execution_plan);
    entry->execution_plan = std::move(execution_plan);
  }
  const ConvKey normalized = entry_key(key);
  std::lock_guard<std::mutex> lock(g_stage_mutex);
  if (g_staged.by_key.insert_or_assign(normalized, std::move(entry)).second) {
    g_staged.order.push_back(normalized);
  }
}

std::shared_ptr<const PlanEntries> commit_plan() {
  std::shared_ptr<const PlanEntries> staged;
  {
    std::lock_guard<std::mutex> lock(g_stage_mutex);
    if (!g_staged.order.empty()) staged = std::make_shared<const PlanEntries>(std::move(g_staged));
    g_staged = PlanEntries{};
  }
  auto previous = std::atomic_load(&g_in_force);
  publish(staged);
  return previous;
}

void reinstate_plan(std::shared_ptr<const PlanEntries> entries) {
  publish(std::move(entries));
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

std::shared_ptr<const SerializedExecutionPlan> serialized_execution_plan_for(const ConvKey& key,
                                                                             const std::string& engine) {
  const auto entry = plan_entry_for(key);
  if (!entry || !entry->execution_plan || !entry->choice || !entry->choice->is_engine() ||
      entry->choice->engine->canonical != engine) {
    return nullptr;
  }
  return entry->execution_plan;
}

namespace {

class PlanExecutionPlans final : public SerializedExecutionPlanSource {
 public:
  std::shared_ptr<const SerializedExecutionPlan> for_entry(const ConvKey& key,
                                                           const std::string& engine) const override {
    return serialized_execution_plan_for(key, engine);
  }
  uint64_t generation() const override { return plan_generation(); }
  std::vector<std::shared_ptr<const SerializedExecutionPlan>> all() const override {
    std::vector<std::shared_ptr<const SerializedExecutionPlan>> carried;
    for (const auto& entry : plan_entries_in_force()) {
      if (entry->execution_plan) carried.push_back(entry->execution_plan);
    }
    return carried;
  }
};

}  // namespace

const SerializedExecutionPlanSource& plan_execution_plans() {
  static const PlanExecutionPlans* source = new PlanExecutionPlans();  // leaked, as the caches
  return *source;
}

}  // namespace torch_cudnn_algo
