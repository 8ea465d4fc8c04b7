// Where a graph runner (a cuDNN graph-API engine configuration, what stock
// PyTorch runs) comes from: one per (configuration, engine name), built once and
// shared (the graph runner cache). A runner comes from the serialized execution
// plan its plan entry carries, from the execution plan cache or a compile worker
// (runtime-compiled configurations), or is built (graph_runner.h).
#pragma once

#include "run/engine_name.h"
#include "run/runner.h"
#include "store/serialized_execution_plan.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

// The runner running `engine` on `key`'s problem, built on first use (heuristics
// query, support check and execution plan build; nothing executed). `*created`
// as for get_legacy_runner. `plan` is what the user's plan carries (the caller
// reads the plan; see plan_execution_plans): a runner built from the serialized
// execution plan of its entry. Must run with key.device current. A
// `runtime_compiled` configuration (cuDNN's RUNTIME_COMPILATION note) is loaded
// from the execution plan cache when an earlier process saved it, else may be
// built by a compile worker while tune() runs, and is then saved (see
// execution_plan_cache.h and compile_workers.h). `default_knobs`: a bare name
// of an engine with knobs is built at cuDNN's default knob values (as the
// fallback list offers it) instead of the knobs the heuristics rank first.
std::shared_ptr<const Runner> get_graph_runner(const ConvKey& key, const EngineName& engine, bool* created,
                                               const SerializedExecutionPlanSource& plan,
                                               bool runtime_compiled = false, bool default_knobs = false);

// The runner for `engine` on `key`: the cache's, else rebuilt from `bytes` (a
// serialized execution plan of that configuration, e.g. a kept decision's),
// else built as get_graph_runner builds it (the bytes cannot serve here).
std::shared_ptr<const Runner> get_graph_runner_from_bytes(const ConvKey& key, const EngineName& engine,
                                                          const std::vector<uint8_t>& bytes);

void clear_graph_runners();
size_t graph_runner_count();

// One runner of the graph runner cache, for tests and reports.
struct GraphRunnerSummary {
  ConvKey key;
  std::string engine;  // the name it was asked for
  std::string choice;  // the configuration cuDNN runs
  std::string refusal;
  int64_t workspace;
  bool deserialized;  // loaded from a serialized execution plan (a plan file's, or a compile worker's)
};
std::vector<GraphRunnerSummary> graph_runner_summaries();

}  // namespace torch_cudnn_algo
