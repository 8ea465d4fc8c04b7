#include "run/execution_plan_loading.h"

#include "base/common.h"
#include "base/cudnn_handle.h"
#include "base/python_bridge.h"
#include "base/work_queue.h"
#include "run/frontend_graph.h"
#include "run/graph_runner.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <set>

namespace torch_cudnn_algo {
namespace {

// A serialized execution plan loaded into a graph and not yet checked against a call's
// configuration or settings: what a prefetch worker hands over.
struct LoadedGraph {
  std::unique_ptr<ConvGraph> graph;  // nullptr when cuDNN could not load it
  std::string why;                   // then: why not
  int64_t us = 0;                    // how long loading took
};

// `bytes` (a serialized execution plan) deserialized on the current device. No warm-up capture (run_warmup):
// the first call may itself be under CUDA graph capture, and a freshly built
// plan is not warmed up either.
LoadedGraph load_serialized_execution_plan(const std::vector<uint8_t>& bytes) {
  bind_frontend_to_cudnn();
  const auto started = std::chrono::steady_clock::now();
  LoadedGraph loaded;
  loaded.graph = std::make_unique<ConvGraph>();
  try {
    const auto status = loaded.graph->deserialize(current_cudnn_handle(), bytes,
                                                  /*enforce_precompiled=*/true, /*run_warmup=*/false);
    if (status.is_bad()) loaded.why = message_of(status);
  } catch (const std::exception& error) {  // the UBJSON parser and cuDNN's plan loader throw
    loaded.why = error.what();
  }
  if (!loaded.why.empty()) loaded.graph.reset();
  loaded.us = microseconds_since(started);
  return loaded;
}

// A plan's serialized execution plan to load for one device.
struct SerializedPlanOnDevice {
  std::shared_ptr<const SerializedExecutionPlan> serialized;  // kept alive while queued
  int device;
  bool operator==(const SerializedPlanOnDevice& other) const {
    return serialized == other.serialized && device == other.device;
  }
};

struct SerializedPlanOnDeviceHash {
  size_t operator()(const SerializedPlanOnDevice& key) const {
    return std::hash<const SerializedExecutionPlan*>()(key.serialized.get()) ^ (static_cast<size_t>(key.device) * 31);
  }
};

// load_serialized_execution_plan on a prefetch worker thread.
std::optional<LoadedGraph> load_serialized_execution_plan_ahead(const SerializedPlanOnDevice& job) {
  try {
    const c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(job.device));
    // PyTorch captures CUDA graphs in the global mode, where a potentially
    // unsafe CUDA call (a cuDNN handle's allocation, a module load) from any
    // thread in that mode invalidates another thread's capture; in the
    // relaxed mode this thread's calls leave the capture alone.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    C10_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    return load_serialized_execution_plan(job.serialized->data);
  } catch (const std::exception&) {
    return std::nullopt;  // the caller loads it itself, and warns if that fails too
  }
}

using PrefetchQueue = WorkQueue<SerializedPlanOnDevice, LoadedGraph, SerializedPlanOnDeviceHash>;

// The prefetch pool: a plan's execution plans loaded ahead of their first
// calls. Loading one from its serialized form costs milliseconds of host time
// (cuDNN reloads the engine and its kernels), and a first training step would
// do all of them one after the other on the training thread. So the first
// call on a device that needs one hands every other serialized execution plan
// the plan in force carries for that device's GPU model to worker threads,
// which load them while the step goes on; a call whose one is still queued
// takes it back and loads it itself, one whose one a worker is loading waits
// for it. Only the deserialization is done ahead: the caller still checks the
// result against its own configuration and settings.
//
// TORCH_CUDNN_ALGO_PLAN_PREFETCH_THREADS workers, 0 for none, by default 2:
// loads contend inside cuDNN, so more workers do not load faster.
class PrefetchPool {
 public:
  // Queues, for `device`, the serialized execution plans of the plan in force made on `gpu`
  // but `own` (its caller loads that one at once), once per device and plan:
  // a new plan first drops what the previous one queued or loaded.
  void start(int device, const std::string& gpu, const SerializedExecutionPlan* own,
             const SerializedExecutionPlanSource& plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t generation = plan.generation();
    if (generation != generation_) {
      queue_.cancel();
      generation_ = generation;
      started_devices_.clear();
    }
    if (!started_devices_.insert(device).second) return;
    for (const auto& carried : plan.all()) {
      if (carried->gpu == gpu && carried.get() != own) queue_.add({carried, device});
    }
  }

  // What a worker loaded of `serialized` for `device` (waiting while it loads), or
  // nullopt: the caller loads it.
  std::optional<LoadedGraph> take(const std::shared_ptr<const SerializedExecutionPlan>& serialized, int device) {
    return queue_.take({serialized, device}, PrefetchQueue::IfQueued::kTakeBack);
  }

  void stop() { queue_.stop(); }

 private:
  PrefetchQueue queue_{load_serialized_execution_plan_ahead, static_cast<size_t>(std::max<int64_t>(
                                                     0, env_int("TORCH_CUDNN_ALGO_PLAN_PREFETCH_THREADS", 2)))};
  std::mutex mutex_;
  uint64_t generation_ = 0;
  std::set<int> started_devices_;
};

PrefetchPool& prefetch_pool() {
  static auto* prefetch = [] {
    auto* created = new PrefetchPool();  // leaked, as the runner caches
    // Workers still inside cuDNN when the process exits would race the
    // libraries' teardown: exit() waits for them (CUDA's own exit handler,
    // registered earlier, runs after this one).
    std::atexit([] { prefetch_pool().stop(); });
    return created;
  }();
  return *prefetch;
}

// The runner running `wanted` on key's problem from `loaded`, a serialized execution plan
// of the same problem: no heuristics query, no engine build, no runtime
// compilation. nullptr when it cannot serve: with *why set when the serialized execution plan is at
// fault, empty when the contract's rules refuse the configuration (the regular
// build then reports that refusal, with the alternatives).
std::shared_ptr<const Runner> graph_runner_from_loaded(const ConvKey& key, const EngineName& wanted,
                                                   LoadedGraph loaded, std::string* why) {
  if (!loaded.graph) {
    *why = loaded.why;
    return nullptr;
  }
  auto runner = std::make_shared<GraphRunner>();
  runner->key = key;
  runner->graph = std::move(loaded.graph);
  ConvGraph& graph = *runner->graph;
  const int64_t index = graph.serialized_plan_index();
  const fe::ExecutionPlan* built = graph.execution_plan_at(index);
  if (built == nullptr) {
    *why = "it holds no execution plan";
    return nullptr;
  }
  const auto name = parse_engine_tag(built->getTag());
  if (!name || !names_configuration(wanted, *name)) {
    *why = "it holds engine configuration '" + built->getTag() + "', not '" + wanted.canonical + "'";
    return nullptr;
  }
  if (!precision_refusal(key, graph.built_numerical_notes_at(index)).empty()) return nullptr;
  int64_t workspace = 0;
  const auto status = graph.get_workspace_size_plan_at_index(index, workspace);
  if (status.is_bad() || workspace < 0) {
    *why = "its workspace size is unknown (" + message_of(status) + ")";
    return nullptr;
  }
  runner->choice = name->canonical;  // as get_plan_name_at_index spells it: knobs sorted
  runner->workspace_bytes = static_cast<size_t>(workspace);
  runner->plan_index = index;
  runner->deserialized = true;
  return runner;
}

}  // namespace

std::shared_ptr<const Runner> graph_runner_from_bytes(const ConvKey& key, const EngineName& wanted,
                                                      const std::vector<uint8_t>& bytes, std::string* why) {
  return graph_runner_from_loaded(key, wanted, load_serialized_execution_plan(bytes), why);
}

std::shared_ptr<const Runner> runner_from_serialized_plan(const ConvKey& key, const EngineName& wanted,
                                                          const SerializedExecutionPlanSource& plan) {
  const auto serialized = plan.for_entry(key, wanted.canonical);
  if (!serialized) return nullptr;
  const std::string gpu = gpu_model_name(key.device);
  // One is made for one GPU model; a device of another (a mixed host) builds.
  if (serialized->gpu != gpu) return nullptr;
  prefetch_pool().start(key.device, gpu, serialized.get(), plan);
  std::optional<LoadedGraph> ahead = prefetch_pool().take(serialized, key.device);
  const bool prefetched = ahead.has_value();
  LoadedGraph loaded = prefetched ? std::move(*ahead) : load_serialized_execution_plan(serialized->data);
  add_execution_plan_deserialize_us(loaded.us);
  std::string why;
  auto runner = graph_runner_from_loaded(key, wanted, std::move(loaded), &why);
  if (runner) {
    count_execution_plan_deserialized(prefetched);
    return runner;
  }
  if (why.empty()) return nullptr;
  count_execution_plan_deserialize_failed();
  if (!serialized->warned.exchange(true)) {
    warn_to_python("torch_cudnn_algo: the plan entry '" + serialized->label +
                   "' carries a built execution plan that cuDNN cannot load here (" + why +
                   "); building " + wanted.canonical + " instead");
  }
  return nullptr;
}

}  // namespace torch_cudnn_algo
