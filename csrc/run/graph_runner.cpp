#include "run/graph_runner.h"

#include "base/cudnn_handle.h"
#include "run/frontend_graph.h"
#include "run/variant_pack_cache.h"
#include "store/serialized_execution_plan.h"

#include <algorithm>
#include <mutex>

namespace torch_cudnn_algo {
namespace {

// An exact configuration (engine and knobs) built straight from its name,
// without a heuristics query: what the tuner builds dozens of per
// configuration. A bare name is exact only for an engine without knobs (else
// it means the knobs the heuristics rank first). Returns nullptr unless the
// execution plan is built and passes the rules; the caller then takes the slow path,
// which also names the alternatives.
std::shared_ptr<GraphRunner> build_exact_graph_runner(const ConvKey& key, const EngineName& wanted) {
  auto runner = std::make_shared<GraphRunner>();
  runner->key = key;
  try {
    runner->graph = make_graph(key, current_cudnn_handle());
  } catch (const c10::Error&) {
    return nullptr;
  }
  ConvGraph& graph = *runner->graph;
  if (wanted.bare && graph.knob_count(wanted.engine) != 0) return nullptr;  // "the knobs ranked first"
  if (graph.create_execution_plan_with_backend_knobs(wanted.engine, wanted.knobs).is_bad()) return nullptr;
  const int64_t index = graph.get_execution_plan_count() - 1;
  if (index < 0 || !precision_refusal(key, graph.numerical_notes_at(index)).empty() ||
      graph.build_plan_at_index(index).is_bad()) {
    return nullptr;
  }
  int64_t workspace = 0;
  if (graph.get_workspace_size_plan_at_index(index, workspace).is_bad() || workspace < 0) {
    return nullptr;
  }
  if (graph.get_plan_name_at_index(index, runner->choice).is_bad()) runner->choice = wanted.canonical;
  runner->workspace_bytes = static_cast<size_t>(workspace);
  runner->plan_index = index;
  return runner;
}

}  // namespace

GraphRunner::~GraphRunner() = default;

void GraphRunner::run(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                      void* workspace) const {
  TORCH_INTERNAL_ASSERT(refusal.empty(), "running a refused runner: ", refusal);
  TORCH_INTERNAL_ASSERT(workspace != nullptr || workspace_bytes == 0);
  void* pointers[3];  // in uid order: x, w, y
  switch (key.dir()) {
    case Direction::kForward:  // (x, w) -> y
      pointers[0] = a.data_ptr(), pointers[1] = b.data_ptr(), pointers[2] = out.data_ptr();
      break;
    case Direction::kBackwardData:  // (dy, w) -> dx
      pointers[0] = out.data_ptr(), pointers[1] = b.data_ptr(), pointers[2] = a.data_ptr();
      break;
    case Direction::kBackwardFilter:  // (x, dy) -> dw
      pointers[0] = a.data_ptr(), pointers[1] = out.data_ptr(), pointers[2] = b.data_ptr();
      break;
  }
  static_assert(kUidX < kUidW && kUidW < kUidY, "pointers are passed in uid order");
  const cudnnHandle_t handle = current_cudnn_handle();
  // A thread's first execution goes through the frontend, which makes the
  // device's context current on a thread that has none yet (a fresh autograd
  // worker); cuDNN's driver-API engines need it.
  thread_local bool frontend_ran_here = false;
  if (frontend_ran_here && execution.load(std::memory_order_relaxed) == kReusePacks) {
    TORCH_CUDNN_ALGO_CHECK(cudnnBackendExecute(handle, graph->backend_plan_at(plan_index),
                                               cached_variant_pack(pointers, workspace)));
    return;
  }
  const auto status = graph->execute_plan_at_index(handle, pointers, 3, workspace, plan_index);
  TORCH_CHECK(status.is_good(), "torch_cudnn_algo: cudnn_frontend execute_plan_at_index(", choice,
              ") failed: ", message_of(status));
  frontend_ran_here = true;
  if (execution.load(std::memory_order_relaxed) == kUndecided) {
    const bool plain =
        graph->plain_variant_pack_at(plan_index, static_cast<int64_t>(workspace_bytes));
    execution.store(plain ? kReusePacks : kThroughFrontend, std::memory_order_relaxed);
  }
}

std::shared_ptr<const Runner> build_graph_runner(const ConvKey& key, const EngineName& wanted) {
  if (auto exact = build_exact_graph_runner(key, wanted)) return exact;
  count_execution_plan_built_by_heuristics();
  auto runner = std::make_shared<GraphRunner>();
  runner->key = key;
  runner->choice = wanted.canonical;
  const cudnnHandle_t handle = current_cudnn_handle();
  try {
    runner->graph = make_graph(key, handle);
  } catch (const c10::Error& error) {
    runner->refusal = error.what_without_backtrace();
    return runner;
  }
  ConvGraph& graph = *runner->graph;
  const auto listed = enumerate(graph);
  const auto found = std::find_if(listed.begin(), listed.end(), [&](const Listed& l) {
    return engine_name_matches(wanted, l.name);
  });
  int64_t index = -1;
  if (found != listed.end()) {
    index = found->index;
  } else {
    // Not offered by the heuristics: ask cuDNN for that engine (and knobs) directly.
    if (graph.create_execution_plan_with_backend_knobs(wanted.engine, wanted.knobs).is_good()) {
      index = graph.get_execution_plan_count() - 1;
    }
  }
  const auto alternatives = [&] {
    for (const auto& l : listed) {
      if (precision_refusal(key, graph.numerical_notes_at(l.index)).empty()) {
        runner->alternatives.push_back(l.name);
      }
    }
  };
  if (index < 0) {
    runner->refusal = "cuDNN offers no such engine configuration for this convolution";
    alternatives();
    return runner;
  }
  if (graph.get_plan_name_at_index(index, runner->choice).is_bad()) {
    runner->choice = wanted.canonical;
  }
  runner->refusal = precision_refusal(key, graph.numerical_notes_at(index));
  runner->refused_by_rule = !runner->refusal.empty();
  if (runner->refusal.empty()) {
    const auto status = graph.build_plan_at_index(index);
    if (status.is_bad()) runner->refusal = "cuDNN cannot build it here (" + message_of(status) + ")";
  }
  if (!runner->refusal.empty()) {
    alternatives();
    return runner;
  }
  int64_t workspace = 0;
  const auto status = graph.get_workspace_size_plan_at_index(index, workspace);
  TORCH_CHECK(status.is_good(), "torch_cudnn_algo: workspace query for ", runner->choice,
              " failed: ", message_of(status));
  TORCH_INTERNAL_ASSERT(workspace >= 0);
  runner->workspace_bytes = static_cast<size_t>(workspace);
  runner->plan_index = index;
  return runner;
}

SerializedBytes build_serialized_execution_plan(const ConvKey& key, const EngineName& engine) {
  const auto runner = build_graph_runner(key, engine);
  return serialize_execution_plan(*runner);
}

SerializedBytes serialize_execution_plan(const Runner& runner) {
  const auto* graph_runner = dynamic_cast<const GraphRunner*>(&runner);
  if (graph_runner == nullptr) return {{}, "a legacy algorithm has no execution plan to serialise"};
  if (!runner.refusal.empty()) return {{}, "it cannot run this convolution: " + runner.refusal};
  const ConvGraph& graph = *graph_runner->graph;
  // Graph::serialize writes the graph's last built plan; each GraphRunner builds one.
  TORCH_INTERNAL_ASSERT(graph.serialized_plan_index() == graph_runner->plan_index,
                        "graph runner ", runner.choice, " built plan ", graph.serialized_plan_index(),
                        " after plan ", graph_runner->plan_index);
  // Serialising reads the graph's tensor uids; callers on several threads must not interleave.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  SerializedBytes serialized;
  try {
    // The plan alone (no graph structure): what deserialize(handle, ...) reloads.
    const auto status = graph.serialize(serialized.data, /*serialize_structure=*/false);
    if (status.is_bad()) serialized.why_not = "cuDNN cannot serialise it: " + message_of(status);
  } catch (const std::exception& error) {  // cuDNN's JSON representation query throws
    serialized.why_not = std::string("cuDNN cannot serialise it: ") + error.what();
  }
  if (!serialized.why_not.empty()) serialized.data.clear();
  return serialized;
}

}  // namespace torch_cudnn_algo
