#include "run/graph_runner_source.h"

#include "base/common.h"
#include "run/compile_workers.h"
#include "run/engine_name.h"
#include "run/execution_plan_loading.h"
#include "run/graph_runner.h"
#include "run/runner_cache.h"
#include "store/execution_plan_cache.h"
#include "store/serialized_execution_plan.h"

#include <chrono>

namespace torch_cudnn_algo {
namespace {

// A runtime-compiled configuration's runner: loaded from the execution plan cache
// when an earlier process saved it, else from a compile worker or built here
// (holding this process's compile turn), and then saved there.
std::shared_ptr<const Runner> runtime_compiled_graph_runner(const ConvKey& key, const EngineName& wanted) {
  if (auto saved = load_cached_execution_plan(key, wanted.canonical)) {
    std::string why;
    if (auto runner = graph_runner_from_bytes(key, wanted, *saved, &why)) {
      count_cached_execution_plan_loaded();
      return runner;
    }
    if (!why.empty()) count_cached_execution_plan_rejected();
  }
  const auto started = std::chrono::steady_clock::now();
  const CompileElsewhere elsewhere = compile_elsewhere(key, wanted.canonical);  // the turn is held until we return
  std::shared_ptr<const Runner> runner;
  const std::vector<uint8_t>* to_save = nullptr;
  if (elsewhere.execution_plan) {
    std::string why;  // a worker's plan this process cannot load is built here instead
    runner = graph_runner_from_bytes(key, wanted, *elsewhere.execution_plan, &why);
    if (runner) to_save = &*elsewhere.execution_plan;
  }
  SerializedBytes built_here;
  if (!runner) {
    runner = build_graph_runner(key, wanted);
    built_here = serialize_execution_plan(*runner);  // nothing to save for a refused plan
    if (built_here.why_not.empty()) to_save = &built_here.data;
  }
  count_execution_plan_built(microseconds_since(started));
  if (to_save != nullptr) save_cached_execution_plan(key, wanted.canonical, *to_save);
  return runner;
}

struct GraphKey {
  ConvKey conv;
  std::string engine;  // the canonical name it was asked for
  bool operator==(const GraphKey& other) const {
    return conv == other.conv && engine == other.engine;
  }
};

struct GraphKeyHash {
  size_t operator()(const GraphKey& key) const {
    return ConvKeyHash()(key.conv) ^ (std::hash<std::string>()(key.engine) * 31);
  }
};

RunnerCache<GraphKey, GraphKeyHash>& graph_runner_cache() {
  static auto* cache = new RunnerCache<GraphKey, GraphKeyHash>();  // leaked: see RunnerCache
  return *cache;
}

}  // namespace

std::shared_ptr<const Runner> get_graph_runner(const ConvKey& key, const EngineName& engine, bool* created,
                                               const SerializedExecutionPlanSource& plan, bool runtime_compiled,
                                               bool default_knobs) {
  return graph_runner_cache().get(GraphKey{key, engine.canonical}, created, [&] {
    EngineName wanted = engine;
    if (default_knobs) wanted.bare = false;  // exact: the engine with no knob set
    if (auto runner = runner_from_serialized_plan(key, wanted, plan)) return runner;
    if (runtime_compiled) return runtime_compiled_graph_runner(key, wanted);
    const auto started = std::chrono::steady_clock::now();
    std::shared_ptr<const Runner> runner = build_graph_runner(key, wanted);
    count_execution_plan_built(microseconds_since(started));
    return runner;
  });
}

std::shared_ptr<const Runner> get_graph_runner_from_bytes(const ConvKey& key, const EngineName& engine,
                                                          const std::vector<uint8_t>& bytes) {
  bool created = false;
  return graph_runner_cache().get(GraphKey{key, engine.canonical}, &created, [&]() -> std::shared_ptr<const Runner> {
    std::string why;
    if (auto runner = graph_runner_from_bytes(key, engine, bytes, &why)) {
      count_execution_plan_deserialized(/*prefetched=*/false);
      return runner;
    }
    if (!why.empty()) count_execution_plan_deserialize_failed();
    const auto started = std::chrono::steady_clock::now();
    std::shared_ptr<const Runner> runner = build_graph_runner(key, engine);
    count_execution_plan_built(microseconds_since(started));
    return runner;
  });
}

void clear_graph_runners() {
  graph_runner_cache().clear();
}

size_t graph_runner_count() {
  return graph_runner_cache().size();
}

std::vector<GraphRunnerSummary> graph_runner_summaries() {
  std::vector<GraphRunnerSummary> summaries;
  graph_runner_cache().for_each([&](const GraphKey& key, const Runner& runner) {
    summaries.push_back({key.conv, key.engine, runner.choice, runner.refusal,
                         static_cast<int64_t>(runner.workspace_bytes), runner.deserialized});
  });
  return summaries;
}

}  // namespace torch_cudnn_algo
