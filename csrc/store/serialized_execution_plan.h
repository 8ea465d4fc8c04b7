// Serialized execution plans, as a torch_cudnn_algo.Plan carries them: the
// cuDNN frontend's serialized form of a graph runner's execution plan
// (Graph::serialize, UBJSON around cuDNN's execution-plan JSON), attached to a
// plan entry so that the first call of its configuration rebuilds the runner
// from it instead of querying the heuristics and compiling (see
// get_graph_runner). Also the counters that prove it: execution plans built
// vs deserialized.
#pragma once

#include "base/conv_key.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

// One serialized execution plan as a plan entry carries it. Immutable but for the
// warning flag.
struct SerializedExecutionPlan {
  std::vector<uint8_t> data;  // what Graph::serialize wrote
  std::string gpu;            // the GPU model it was made on (a device of another model builds)
  std::string label;          // the plan entry, for messages
  // Set by the first "cannot be loaded here" warning: one per entry, not per device.
  mutable std::atomic<bool> warned{false};
};

// Raises ValueError naming blob.label unless blob.data parses as the
// frontend's serialized execution plan (UBJSON object with the execution plan, its
// tensor uids and behaviour notes). Needs no GPU: a file's corruption is
// caught when the plan is put in use, before anything of it is.
void check_serialized_execution_plan(const SerializedExecutionPlan& blob);

// What a plan carries for graph runners, handed down by the policy layer that
// reads the plan (see plan_execution_plans in decide/plan.h): a runner never
// reads the plan itself. Each call reads the plan in force at that moment.
class SerializedExecutionPlanSource {
 public:
  virtual ~SerializedExecutionPlanSource() = default;
  // The serialized execution plan the entry for key's configuration carries
  // when that entry's choice is `engine` (canonical name), else nullptr.
  virtual std::shared_ptr<const SerializedExecutionPlan> for_entry(const ConvKey& key,
                                                                   const std::string& engine) const = 0;
  // Counts the plans put in force: what tells one plan's from the next's.
  virtual uint64_t generation() const = 0;
  // Every serialized execution plan the plan in force carries, in staging order.
  virtual std::vector<std::shared_ptr<const SerializedExecutionPlan>> all() const = 0;
};

// The GPU model of CUDA device `device`, as torch.cuda.get_device_name gives it.
std::string gpu_model_name(int device);

// Monotonic counts since the process started, for tests and benchmarks:
// execution plans built from scratch for the runner cache (heuristics and
// engine build; of those, the ones whose configuration a heuristics query had
// to find, which is slow: see build_exact_graph_runner), rebuilt from a
// serialized execution plan (of those, loaded ahead by the prefetch pool), and
// serialized execution plans that cuDNN could not load (the execution plan was
// then built); and the microseconds spent building and rebuilding, added up
// over threads, so that a first step's time can be split into what execution
// plans cost and what they did not.
struct ExecutionPlanCounts {
  int64_t built = 0;
  int64_t built_by_heuristics = 0;
  int64_t deserialized = 0;
  int64_t prefetched = 0;
  int64_t deserialize_failed = 0;
  int64_t build_us = 0;
  int64_t deserialize_us = 0;  // attempts that failed included
};
void count_execution_plan_built(int64_t us);
void count_execution_plan_built_by_heuristics();
void count_execution_plan_deserialized(bool prefetched);
void count_execution_plan_deserialize_failed();
void add_execution_plan_deserialize_us(int64_t us);
ExecutionPlanCounts execution_plan_counts();

}  // namespace torch_cudnn_algo
