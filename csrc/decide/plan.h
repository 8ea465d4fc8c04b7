// The per-configuration choices of the torch_cudnn_algo.Plan in use: for a
// convolution configuration the plan names, its entry wins over the
// direction's flag; every other configuration follows the flags.
//
// Entries match on the convolution itself (direction, shapes, dtype, layout,
// stride, padding, dilation, groups, transposed, output padding), not on the
// device or the determinism/TF32 settings: every rank of a job, whatever its
// GPU index, runs the same entry, and the contract's rules still refuse an
// entry the settings forbid (warning or strict error, as for a flag).
#pragma once

#include "base/conv_key.h"
#include "decide/choice.h"
#include "store/serialized_execution_plan.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

// One plan entry. Immutable but for the run count.
struct PlanEntry {
  std::string label;                     // the configuration as the plan names it
  std::shared_ptr<const Choice> choice;  // nullptr: stock PyTorch's own path
  // The entry's engine configuration as built where the plan was made, or
  // nullptr: what get_graph_runner rebuilds the runner from (see
  // serialized_execution_plan.h).
  std::shared_ptr<const SerializedExecutionPlan> execution_plan;
  mutable std::atomic<int64_t> runs{0};  // calls that ran this entry's choice
};

// Adds an entry to the plan being staged (replacing one for the same
// configuration). `value` is a flag value ("1", an engine configuration name)
// or "" for the stock path; a malformed one raises ValueError. `execution_plan`,
// if not null, is the entry's serialized execution plan (an engine choice only;
// a corrupt one raises ValueError). Nothing is in force until commit_plan().
void stage_plan_entry(const ConvKey& key, const std::string& value, const std::string& label,
                      std::shared_ptr<const SerializedExecutionPlan> execution_plan = nullptr);

// The entries of one plan put in force (opaque outside plan.cpp).
struct PlanEntries;

// Puts the staged entries in force (an empty stage: no plan), replacing the
// previous plan atomically; returns the previous one. The caller (the ops)
// then (de)registers the overrides to match, and reinstates the
// previous plan if that fails.
std::shared_ptr<const PlanEntries> commit_plan();

// Puts `entries` (a plan commit_plan returned) back in force.
void reinstate_plan(std::shared_ptr<const PlanEntries> entries);

// Forgets the staged entries (a plan that failed validation half-way).
void discard_staged_plan();

// The entry for key's configuration in the plan in force, or nullptr. Called
// once per configuration per thread (select_runner memoizes the outcome).
std::shared_ptr<const PlanEntry> plan_entry_for(const ConvKey& key);

// Whether the plan in force has an entry in `direction` (its calls must then
// pass through the overrides). One atomic load: called on every convolution.
bool plan_covers(Direction direction);

// Counts the plans put in force (commit_plan): what tells a cache
// made for one plan from the next plan's, even at a reused address.
uint64_t plan_generation();

// The entries in force, in staging order.
std::vector<std::shared_ptr<const PlanEntry>> plan_entries_in_force();

// The serialized execution plan the entry in force for key's configuration
// carries when that entry's choice is `engine` (canonical name), else nullptr.
std::shared_ptr<const SerializedExecutionPlan> serialized_execution_plan_for(const ConvKey& key,
                                                                             const std::string& engine);

// What the plan in force carries for graph runners, as they are handed it
// (a runner never reads the plan itself).
const SerializedExecutionPlanSource& plan_execution_plans();

}  // namespace torch_cudnn_algo
