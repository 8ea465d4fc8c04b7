#include "graph_runner.h"

#include "compile_workers.h"
#include "execution_plan_cache.h"
#include "plan.h"
#include "cudnn_handle.h"
#include "serialized_execution_plan.h"
#include "runner_cache.h"
#include "python_bridge.h"
#include "variant_pack_cache.h"
#include "work_queue.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <unordered_map>

// Built with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, the frontend calls cuDNN
// through this handle (see bind_frontend_to_cudnn).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace torch_cudnn_algo {
namespace {

namespace fe = cudnn_frontend;

int64_t microseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
}

// Points the frontend at the cuDNN torch already loaded (same soname, so
// RTLD_NOLOAD finds it): one cuDNN per process.
void bind_frontend_to_cudnn() {
  static const bool bound = [] {
    const std::string soname = "libcudnn.so." + std::to_string(CUDNN_MAJOR);
    void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) handle = dlopen(soname.c_str(), RTLD_NOW);
    TORCH_CHECK(handle != nullptr, "torch_cudnn_algo: cannot open ", soname, ": ", dlerror());
    cudnn_frontend::cudnn_dlhandle = handle;
    return true;
  }();
  (void)bound;
}

// The frontend keeps each configuration's notes and backend descriptor in its
// protected plan list; this subclass reads them.
class ConvGraph : public fe::graph::Graph {
 public:
  // The plan Graph::serialize writes: the last one built (or the deserialised one).
  int64_t serialized_plan_index() const { return plans.candidate; }
  // Graph::create_execution_plan with each knob given by its backend type id.
  // The frontend's knob enum has no word for several backend knob types that
  // cuDNN's older engines still report and name (SPLIT_K k0, USE_TEX k3,
  // KBLOCK k5, LDGA k6, LDGC k22...), so Graph::create_execution_plan refuses
  // every configuration of those engines, and building one by name fell back
  // to a full heuristics query: heuristics mode B, which the frontend
  // serialises process-wide, at ~30 ms a build on the H100 (RegNetY's grouped
  // layers: 7 of 8 build threads waiting on that lock).
  fe::error_t create_execution_plan_with_backend_knobs(int64_t engine_id,
                                                      const std::vector<std::pair<int64_t, int64_t>>& knobs);
  // How many knobs cuDNN reports for `engine_id` on this graph (deprecated
  // knob types included), or -1 if the query fails.
  int64_t knob_count(int64_t engine_id);
  // The built (or deserialised) execution plan at `index`, or nullptr.
  const fe::ExecutionPlan* execution_plan_at(int64_t index) const;
  // Numerical notes read off a built plan: a deserialised graph has no engine
  // configuration list, so numerical_notes_at does not apply to it.
  std::vector<std::string> built_numerical_notes_at(int64_t index) const;
  std::vector<std::string> numerical_notes_at(int64_t index) const;
  std::vector<std::string> behavior_notes_at(int64_t index) const;

  // The built plan's backend descriptor, what cudnnBackendExecute runs.
  cudnnBackendDescriptor_t backend_plan_at(int64_t index) const {
    return plans.execution_plans.at(index)->get_raw_desc();
  }

  // Whether executing the plan at `index` needs nothing but a variant pack of
  // the three operands and the workspace: no frontend-managed workspace, no
  // auxiliary slots, no CUDA-graph retention of a runtime-compiled plan. Only
  // meaningful once the frontend prepared its variant-pack template (after the
  // first execute).
  bool plain_variant_pack_at(int64_t index, int64_t workspace_bytes) const {
    const auto& pack = varpack_template;
    const auto& plan = *plans.execution_plans.at(index);
    return pack.all_uids == std::vector<int64_t>{kUidX, kUidW, kUidY} &&
           pack.user_slots.size() == 3 && pack.workspace_slots.empty() &&
           pack.replacement_slots.empty() && pack.backend_slots.empty() &&
           plan.getWorkspaceSize() == workspace_bytes && !plan.needs_cuda_graph_retention();
  }
};

const char* note_name(fe::NumericalNote_t note) {
  switch (note) {
    case fe::NumericalNote_t::TENSOR_CORE: return "TENSOR_CORE";
    case fe::NumericalNote_t::DOWN_CONVERT_INPUTS: return "DOWN_CONVERT_INPUTS";
    case fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION: return "REDUCED_PRECISION_REDUCTION";
    case fe::NumericalNote_t::FFT: return "FFT";
    case fe::NumericalNote_t::NONDETERMINISTIC: return "NONDETERMINISTIC";
    case fe::NumericalNote_t::WINOGRAD: return "WINOGRAD";
    case fe::NumericalNote_t::WINOGRAD_TILE_4x4: return "WINOGRAD_TILE_4x4";
    case fe::NumericalNote_t::WINOGRAD_TILE_6x6: return "WINOGRAD_TILE_6x6";
    case fe::NumericalNote_t::WINOGRAD_TILE_13x13: return "WINOGRAD_TILE_13x13";
    case fe::NumericalNote_t::STRICT_NAN_PROP: return "STRICT_NAN_PROP";
    default: return nullptr;
  }
}

const char* note_name(fe::BehaviorNote_t note) {
  switch (note) {
    case fe::BehaviorNote_t::RUNTIME_COMPILATION: return "RUNTIME_COMPILATION";
    case fe::BehaviorNote_t::REQUIRES_FILTER_INT8x32_REORDER: return "REQUIRES_FILTER_INT8x32_REORDER";
    case fe::BehaviorNote_t::REQUIRES_BIAS_INT8x32_REORDER: return "REQUIRES_BIAS_INT8x32_REORDER";
    case fe::BehaviorNote_t::SUPPORTS_CUDA_GRAPH_NATIVE_API: return "SUPPORTS_CUDA_GRAPH_NATIVE_API";
    case fe::BehaviorNote_t::CUBLASLT_DEPENDENCY: return "CUBLASLT_DEPENDENCY";
    default: return nullptr;
  }
}

fe::error_t ConvGraph::create_execution_plan_with_backend_knobs(
    int64_t engine_id, const std::vector<std::pair<int64_t, int64_t>>& knobs) {
  // The frontend's error macros only compile inside its namespace: spelled out.
  const auto failed = [](const char* what) {
    return fe::error_t{fe::error_code_t::CUDNN_BACKEND_API_FAILED, what};
  };
  fe::detail::backend_descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  if (engine.get_status() != CUDNN_STATUS_SUCCESS) return failed("creating the engine descriptor");
  if (const auto status =
          fe::detail::create_engine(engine, engine_id, operation_graph->get_raw_desc(), device_properties);
      status.is_bad()) {
    return status;
  }
  std::vector<fe::detail::backend_descriptor> knob_choices;
  for (const auto& [id, value] : knobs) {
    fe::detail::backend_descriptor choice(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    const auto type = static_cast<cudnnBackendKnobType_t>(id);
    int64_t knob_value = value;
    if (choice.get_status() != CUDNN_STATUS_SUCCESS ||
        fe::detail::set_attribute(choice.get_ptr(), CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1,
                                  &type) != CUDNN_STATUS_SUCCESS ||
        fe::detail::set_attribute(choice.get_ptr(), CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
                                  &knob_value) != CUDNN_STATUS_SUCCESS ||
        fe::detail::finalize(choice.get_ptr()) != CUDNN_STATUS_SUCCESS) {
      return failed("setting a knob choice");
    }
    knob_choices.push_back(std::move(choice));
  }
  auto config = fe::make_shared_backend_pointer(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  if (const auto status = fe::detail::create_engine_config(config, engine, knob_choices); status.is_bad()) {
    return status;
  }
  plans.enqueue_engine_configs({config});
  return plans.query_properties();
}

int64_t ConvGraph::knob_count(int64_t engine_id) {
  std::vector<fe::Knob> knobs;
  if (get_knobs_for_engine(engine_id, knobs).is_bad()) return -1;
  return static_cast<int64_t>(knobs.size());
}

std::vector<std::string> ConvGraph::numerical_notes_at(int64_t index) const {
  std::set<std::string> names;  // the frontend may repeat a note
  for (const auto note : plans.numeric_notes.at(index)) {
    if (const char* name = note_name(note)) names.insert(name);
  }
  return {names.begin(), names.end()};
}

std::vector<std::string> ConvGraph::behavior_notes_at(int64_t index) const {
  std::set<std::string> names;
  for (const auto note : plans.behavior_notes.at(index)) {
    if (const char* name = note_name(note)) names.insert(name);
  }
  return {names.begin(), names.end()};
}

const fe::ExecutionPlan* ConvGraph::execution_plan_at(int64_t index) const {
  if (index < 0 || index >= static_cast<int64_t>(plans.execution_plans.size())) return nullptr;
  return plans.execution_plans[index].get();
}

std::vector<std::string> ConvGraph::built_numerical_notes_at(int64_t index) const {
  std::set<std::string> names;
  const fe::ExecutionPlan* plan = execution_plan_at(index);
  TORCH_INTERNAL_ASSERT(plan != nullptr, "no built execution plan at index ", index);
  for (const auto note : plan->getAllNumericNotes()) {
    if (const char* name = note_name(fe::detail::convert_from_cudnn_type(note))) names.insert(name);
  }
  return {names.begin(), names.end()};
}

bool has(const std::vector<std::string>& notes, const char* name) {
  return std::find(notes.begin(), notes.end(), name) != notes.end();
}

// The precision and determinism rules of the contract, applied to one
// configuration's notes; returns why it is refused, or "".
std::string precision_refusal(const ConvKey& key, const std::vector<std::string>& notes) {
  if (key.deterministic && has(notes, "NONDETERMINISTIC")) {
    return "it is non-deterministic and deterministic algorithms are required "
           "(torch.backends.cudnn.deterministic or torch.use_deterministic_algorithms)";
  }
  if (key.scalar_type() == at::kFloat && !key.allow_tf32 &&
      (has(notes, "TENSOR_CORE") || has(notes, "DOWN_CONVERT_INPUTS"))) {
    return "it computes float32 with TF32 tensor cores or down-converted inputs and "
           "allow_tf32 is False";
  }
  return "";
}

fe::DataType_t frontend_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return fe::DataType_t::FLOAT;
    case at::kHalf: return fe::DataType_t::HALF;
    case at::kBFloat16: return fe::DataType_t::BFLOAT16;
    case at::kDouble: return fe::DataType_t::DOUBLE;
    default: TORCH_CHECK(false, "torch_cudnn_algo: no cuDNN graph type for ", dtype);
  }
}

std::vector<int64_t> to_vector(at::IntArrayRef values) {
  return {values.begin(), values.end()};
}

std::string message_of(fe::error_t status) {  // get_message() is not const
  return status.get_message().empty() ? "cudnn_frontend error" : status.get_message();
}

// The operation graph of `key`'s direction; throws with cuDNN's message if the
// graph API rejects the problem.
std::unique_ptr<ConvGraph> make_graph(const ConvKey& key, cudnnHandle_t handle) {
  bind_frontend_to_cudnn();
  auto graph = std::make_unique<ConvGraph>();
  const auto compute = key.scalar_type() == at::kDouble ? fe::DataType_t::DOUBLE : fe::DataType_t::FLOAT;
  graph->set_io_data_type(frontend_type(key.scalar_type()))
      .set_intermediate_data_type(compute)
      .set_compute_data_type(compute);
  const auto spatial = [&](const std::array<int64_t, kMaxSpatialDims>& v) {
    return std::vector<int64_t>(v.begin(), v.begin() + (key.dim - 2));
  };
  const auto strides = [&](at::IntArrayRef sizes) {
    const auto s = canonical_strides(sizes, key.format());
    return std::vector<int64_t>(s.begin(), s.end());
  };
  const auto tensor = [&](const char* name, int64_t uid, at::IntArrayRef sizes) {
    return graph->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_dim(to_vector(sizes))
                             .set_stride(strides(sizes)));
  };
  const auto pad = spatial(key.padding), stride = spatial(key.stride), dil = spatial(key.dilation);
  switch (key.dir()) {
    case Direction::kForward: {
      auto y = graph->conv_fprop(tensor("x", kUidX, key.input()), tensor("w", kUidW, key.weight()),
                                 fe::graph::Conv_fprop_attributes()
                                     .set_padding(pad)
                                     .set_stride(stride)
                                     .set_dilation(dil)
                                     .set_compute_data_type(compute));
      y->set_output(true).set_uid(kUidY).set_dim(to_vector(key.output())).set_stride(strides(key.output()));
      break;
    }
    case Direction::kBackwardData: {
      auto dx = graph->conv_dgrad(tensor("dy", kUidY, key.output()), tensor("w", kUidW, key.weight()),
                                  fe::graph::Conv_dgrad_attributes()
                                      .set_padding(pad)
                                      .set_stride(stride)
                                      .set_dilation(dil)
                                      .set_compute_data_type(compute));
      dx->set_output(true).set_uid(kUidX).set_dim(to_vector(key.input())).set_stride(strides(key.input()));
      break;
    }
    case Direction::kBackwardFilter: {
      auto dw = graph->conv_wgrad(tensor("dy", kUidY, key.output()), tensor("x", kUidX, key.input()),
                                  fe::graph::Conv_wgrad_attributes()
                                      .set_padding(pad)
                                      .set_stride(stride)
                                      .set_dilation(dil)
                                      .set_compute_data_type(compute));
      dw->set_output(true).set_uid(kUidW).set_dim(to_vector(key.weight())).set_stride(strides(key.weight()));
      break;
    }
  }
  auto status = graph->validate();
  TORCH_CHECK(status.is_good(), "cuDNN's graph API rejects this convolution: ", message_of(status));
  status = graph->build_operation_graph(handle);
  TORCH_CHECK(status.is_good(), "cuDNN's graph API rejects this convolution: ", message_of(status));
  return graph;
}

struct Listed {
  int64_t index;  // plan index in the graph
  std::string name;
  const char* source;
};

// Heuristics A, B (unless `with_mode_b` is false: its query is the slow one),
// then the fallback list, deduplicated by name.
std::vector<Listed> enumerate(ConvGraph& graph, bool with_mode_b = true) {
  std::vector<Listed> listed;
  std::set<std::string> seen;
  const std::pair<fe::HeurMode_t, const char*> modes[] = {
      {fe::HeurMode_t::A, "heuristics_a"}, {fe::HeurMode_t::B, "heuristics_b"},
      {fe::HeurMode_t::FALLBACK, "fallback"}};
  for (const auto& [mode, source] : modes) {
    if (mode == fe::HeurMode_t::B && !with_mode_b) continue;
    const int64_t before = graph.get_execution_plan_count();
    if (graph.create_execution_plans({mode}).is_bad()) continue;  // a mode may offer nothing
    for (int64_t i = before; i < graph.get_execution_plan_count(); ++i) {
      std::string name;
      if (graph.get_plan_name_at_index(i, name).is_good() && seen.insert(name).second) {
        listed.push_back({i, name, source});
      }
    }
  }
  return listed;
}

std::string knob_space(ConvGraph& graph, int64_t engine) {
  std::vector<fe::Knob> knobs;
  if (graph.get_knobs_for_engine(engine, knobs).is_bad()) return "";
  std::ostringstream out;
  for (const auto& knob : knobs) {
    cudnnBackendKnobType_t backend_type;
    if (fe::convert_to_backend_knob_type(knob.type, backend_type) != CUDNN_STATUS_SUCCESS) continue;
    out << (out.tellp() > 0 ? " " : "") << "k" << static_cast<int>(backend_type) << "="
        << knob.minValue << ".." << knob.maxValue;
    if (knob.stride > 1) out << "/" << knob.stride;
  }
  return out.str();
}

struct GraphRunner final : Runner {
  std::unique_ptr<ConvGraph> graph;
  int64_t plan_index = -1;
  // Decided after the first execute (see ConvGraph::plain_variant_pack_at):
  // whether calls may skip the frontend and reuse cached variant packs.
  enum : int8_t { kUndecided, kReusePacks, kThroughFrontend };
  mutable std::atomic<int8_t> execution{kUndecided};

  void run(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
           void* workspace) const override {
    TORCH_INTERNAL_ASSERT(refusal.empty(), "running a refused plan: ", refusal);
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
};

// A configuration tag parsed like a user's engine name; nullopt if cuDNN ever
// spells one differently (it is then simply never matched).
std::optional<EngineName> parse_tag(const std::string& tag) {
  try {
    return parse_engine_name(tag);
  } catch (const c10::Error&) {
    return std::nullopt;
  }
}

bool matches(const EngineName& wanted, const std::string& tag) {
  const auto candidate = parse_tag(tag);
  return candidate && wanted.engine == candidate->engine &&
         (wanted.bare || wanted.knobs == candidate->knobs);
}

// An exact configuration (engine and knobs) built straight from its name,
// without a heuristics query: what the tuner builds dozens of per
// configuration. A bare name is exact only for an engine without knobs (else
// it means the knobs the heuristics rank first). Returns nullptr unless the
// plan is built and passes the rules; the caller then takes the slow path,
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
    return matches(wanted, l.name);
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

// Whether `wanted` names the configuration `built`: its engine and every knob
// it sets (a bare name sets none). cuDNN may report knobs the name left out.
bool names_configuration(const EngineName& wanted, const EngineName& built) {
  if (wanted.engine != built.engine) return false;
  return std::all_of(wanted.knobs.begin(), wanted.knobs.end(), [&](const auto& knob) {
    return std::find(built.knobs.begin(), built.knobs.end(), knob) != built.knobs.end();
  });
}

// A blob deserialised into a graph and not yet checked against a call's
// configuration or settings: what a prefetch worker hands over.
struct LoadedGraph {
  std::unique_ptr<ConvGraph> graph;  // nullptr when cuDNN could not load the blob
  std::string why;                   // then: why not
  int64_t us = 0;                    // how long loading took
};

// `blob` deserialised on the current device. No warm-up capture (run_warmup):
// the first call may itself be under CUDA graph capture, and a freshly built
// plan is not warmed up either.
LoadedGraph load_serialized_execution_plan(const std::vector<uint8_t>& blob) {
  bind_frontend_to_cudnn();
  const auto started = std::chrono::steady_clock::now();
  LoadedGraph loaded;
  loaded.graph = std::make_unique<ConvGraph>();
  try {
    const auto status = loaded.graph->deserialize(current_cudnn_handle(), blob,
                                                  /*enforce_precompiled=*/true, /*run_warmup=*/false);
    if (status.is_bad()) loaded.why = message_of(status);
  } catch (const std::exception& error) {  // the UBJSON parser and cuDNN's plan loader throw
    loaded.why = error.what();
  }
  if (!loaded.why.empty()) loaded.graph.reset();
  loaded.us = microseconds_since(started);
  return loaded;
}

// A plan's blob to load for one device.
struct SerializedPlanOnDevice {
  std::shared_ptr<const SerializedExecutionPlan> blob;  // kept alive while queued
  int device;
  bool operator==(const SerializedPlanOnDevice& other) const {
    return blob == other.blob && device == other.device;
  }
};

struct SerializedPlanOnDeviceHash {
  size_t operator()(const SerializedPlanOnDevice& key) const {
    return std::hash<const SerializedExecutionPlan*>()(key.blob.get()) ^ (static_cast<size_t>(key.device) * 31);
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
    return load_serialized_execution_plan(job.blob->data);
  } catch (const std::exception&) {
    return std::nullopt;  // the caller loads it itself, and warns if that fails too
  }
}

using PrefetchQueue = WorkQueue<SerializedPlanOnDevice, LoadedGraph, SerializedPlanOnDeviceHash>;

// Loading a plan's execution plans ahead of their first calls. Loading one
// from its blob costs milliseconds of host time (cuDNN reloads the engine and
// its kernels: 15 ms a plan on conv_tasnet's runtime-compiled engines, H100),
// and a first training step with a plan did all of them one after the other on
// the training thread. So the first call on a device that needs a blob hands
// every other blob the plan in force carries for that device's GPU model to
// worker threads, which load them while the step goes on; a call whose blob is
// still queued takes it back and loads it itself, one whose blob a worker is
// loading waits for it. Only the deserialisation is done ahead: the caller
// still checks the result against its own configuration and settings.
//
// TORCH_CUDNN_ALGO_PLAN_PREFETCH_THREADS workers, 0 for none, by default 2.
// Loads contend inside cuDNN: on the H100 a blob took 15 ms alone and 70 ms
// beside 7 others, and 1, 2, 4 or 8 workers gave the same first steps within
// noise (conv_tasnet 0.36-0.42 s, resnet50_amp 0.46-0.55 s, mobilenet_v3_large
// 0.51-0.76 s; none: 0.58, 0.72, 1.45 s), 2 the steadiest.
class PrefetchPool {
 public:
  // Queues, for `device`, the blobs of the plan in force made on `gpu`
  // but `own` (its caller loads that one at once), once per device and plan:
  // a new plan first drops what the previous one queued or loaded.
  void start(int device, const std::string& gpu, const SerializedExecutionPlan* own) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t generation = plan_generation();
    if (generation != generation_) {
      queue_.cancel();
      generation_ = generation;
      started_devices_.clear();
    }
    if (!started_devices_.insert(device).second) return;
    for (const auto& entry : plan_entries_in_force()) {
      if (entry->execution_plan && entry->execution_plan->gpu == gpu && entry->execution_plan.get() != own) {
        queue_.add({entry->execution_plan, device});
      }
    }
  }

  // What a worker loaded of `blob` for `device` (waiting while it loads), or
  // nullopt: the caller loads it.
  std::optional<LoadedGraph> take(const std::shared_ptr<const SerializedExecutionPlan>& blob, int device) {
    return queue_.take({blob, device}, PrefetchQueue::IfQueued::kTakeBack);
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
    auto* created = new PrefetchPool();  // leaked, as the plan cache
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
// compilation. nullptr when it cannot serve: with *why set when the blob is at
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
  const auto name = parse_tag(built->getTag());
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

// The plan for `wanted` rebuilt from the blob the plan in force carries for
// key's configuration, or nullptr (no blob, or it cannot serve: the caller
// builds the plan as without one). The first such call on a device starts
// loading the plan's other blobs ahead.
std::shared_ptr<const Runner> runner_from_serialized_plan(const ConvKey& key, const EngineName& wanted) {
  const auto blob = serialized_execution_plan_for(key, wanted.canonical);
  if (!blob) return nullptr;
  const std::string gpu = gpu_model_name(key.device);
  // A blob is made for one GPU model; a device of another (a mixed host) builds.
  if (blob->gpu != gpu) return nullptr;
  prefetch_pool().start(key.device, gpu, blob.get());
  std::optional<LoadedGraph> ahead = prefetch_pool().take(blob, key.device);
  const bool prefetched = ahead.has_value();
  LoadedGraph loaded = prefetched ? std::move(*ahead) : load_serialized_execution_plan(blob->data);
  add_execution_plan_deserialize_us(loaded.us);
  std::string why;
  auto runner = graph_runner_from_loaded(key, wanted, std::move(loaded), &why);
  if (runner) {
    count_execution_plan_deserialized(prefetched);
    return runner;
  }
  if (why.empty()) return nullptr;
  count_execution_plan_deserialize_failed();
  if (!blob->warned.exchange(true)) {
    warn_to_python("torch_cudnn_algo: the plan entry '" + blob->label +
                   "' carries a built execution plan that cuDNN cannot load here (" + why +
                   "); building " + wanted.canonical + " instead");
  }
  return nullptr;
}

// A runtime-compiled configuration's runner: loaded from the execution plan cache
// when an earlier process saved it, else from a compile worker or built here
// (holding this process's compile turn), and then saved there.
std::shared_ptr<const Runner> runtime_compiled_graph_runner(const ConvKey& key, const EngineName& wanted) {
  if (auto saved = load_cached_execution_plan(key, wanted.canonical)) {
    std::string why;
    if (auto runner = graph_runner_from_loaded(key, wanted, load_serialized_execution_plan(*saved), &why)) {
      count_cached_execution_plan_loaded();
      return runner;
    }
    if (!why.empty()) count_cached_execution_plan_rejected();
  }
  const auto started = std::chrono::steady_clock::now();
  const CompileElsewhere elsewhere = compile_elsewhere(key, wanted.canonical);  // the turn is held until we return
  std::shared_ptr<const Runner> runner;
  const std::vector<uint8_t>* to_save = nullptr;
  if (elsewhere.blob) {
    std::string why;  // a worker's plan this process cannot load is built here instead
    runner = graph_runner_from_loaded(key, wanted, load_serialized_execution_plan(*elsewhere.blob), &why);
    if (runner) to_save = &*elsewhere.blob;
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
  std::string engine;
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

EngineName parse_engine_name(const std::string& name) {
  std::string lowered = name;
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static const std::regex whole(R"(eng(\d{1,9})((_k\d{1,9}=-?\d{1,18})*))");
  std::smatch match;
  TORCH_CHECK_VALUE(std::regex_match(lowered, match, whole), "torch_cudnn_algo: '", name,
                    "' is not an engine configuration name; expected 'engN' or "
                    "'engN_kA=V_kB=W...' (for example 'eng62' or 'eng62_k2=1_k13=1')");
  EngineName parsed;
  parsed.engine = std::stoll(match[1].str());
  const std::string knobs = match[2].str();
  static const std::regex knob(R"(_k(\d+)=(-?\d+))");
  for (auto it = std::sregex_iterator(knobs.begin(), knobs.end(), knob); it != std::sregex_iterator(); ++it) {
    parsed.knobs.emplace_back(std::stoll((*it)[1].str()), std::stoll((*it)[2].str()));
  }
  std::sort(parsed.knobs.begin(), parsed.knobs.end());
  for (size_t i = 1; i < parsed.knobs.size(); ++i) {
    TORCH_CHECK_VALUE(parsed.knobs[i].first != parsed.knobs[i - 1].first, "torch_cudnn_algo: '",
                      name, "' sets knob k", parsed.knobs[i].first, " twice");
  }
  parsed.bare = parsed.knobs.empty();
  parsed.canonical = "eng" + std::to_string(parsed.engine);
  for (const auto& [id, value] : parsed.knobs) {
    parsed.canonical += "_k" + std::to_string(id) + "=" + std::to_string(value);
  }
  return parsed;
}

std::shared_ptr<const Runner> get_graph_runner(const ConvKey& key, const std::string& engine,
                                           bool* created, bool runtime_compiled) {
  return graph_runner_cache().get(GraphKey{key, engine}, created, [&] {
    const EngineName wanted = parse_engine_name(engine);
    if (auto runner = runner_from_serialized_plan(key, wanted)) return runner;
    if (runtime_compiled) return runtime_compiled_graph_runner(key, wanted);
    const auto started = std::chrono::steady_clock::now();
    std::shared_ptr<const Runner> runner = build_graph_runner(key, wanted);
    count_execution_plan_built(microseconds_since(started));
    return runner;
  });
}

SerializedBytes build_serialized_execution_plan(const ConvKey& key, const std::string& engine) {
  const auto runner = build_graph_runner(key, parse_engine_name(engine));
  return serialize_execution_plan(*runner);
}

void clear_graph_runners() {
  graph_runner_cache().clear();
}

size_t graph_runner_count() {
  return graph_runner_cache().size();
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

std::vector<GraphRunnerSummary> graph_runner_summaries() {
  std::vector<GraphRunnerSummary> summaries;
  graph_runner_cache().for_each([&](const GraphKey& key, const Runner& runner) {
    summaries.push_back({key.conv, key.engine, runner.choice, runner.refusal,
                         static_cast<int64_t>(runner.workspace_bytes), runner.deserialized});
  });
  return summaries;
}

namespace {

// What cuDNN tells about one listed configuration before any plan is built.
EngineCandidate described_candidate(const ConvKey& key, const ConvGraph& graph, const Listed& listed) {
  EngineCandidate candidate;
  candidate.name = listed.name;
  candidate.source = listed.source;
  candidate.numerical_notes = graph.numerical_notes_at(listed.index);
  candidate.behavior_notes = graph.behavior_notes_at(listed.index);
  candidate.refusal = precision_refusal(key, candidate.numerical_notes);
  return candidate;
}

}  // namespace

std::vector<EngineCandidate> list_engine_candidates(const ConvKey& key) {
  auto graph = make_graph(key, current_cudnn_handle());
  std::vector<EngineCandidate> candidates;
  std::map<int64_t, std::string> knob_spaces;
  for (const auto& listed : enumerate(*graph)) {
    EngineCandidate candidate = described_candidate(key, *graph, listed);
    // cuDNN reports a configuration's workspace once its plan is built (no kernel runs).
    const auto built = graph->build_plan_at_index(listed.index);
    if (built.is_bad()) {
      if (candidate.refusal.empty()) {
        candidate.refusal = "cuDNN cannot build it here (" + message_of(built) + ")";
      }
    } else if (graph->get_workspace_size_plan_at_index(listed.index, candidate.workspace).is_bad()) {
      candidate.workspace = -1;
    }
    if (const auto tag = parse_tag(listed.name)) {
      if (!knob_spaces.count(tag->engine)) knob_spaces[tag->engine] = knob_space(*graph, tag->engine);
      candidate.knob_space = knob_spaces[tag->engine];
    }
    candidates.push_back(std::move(candidate));
  }
  return candidates;
}

std::vector<EngineCandidate> heuristic_engine_candidates(const ConvKey& key) {
  auto graph = make_graph(key, current_cudnn_handle());
  std::vector<EngineCandidate> candidates;
  for (const auto& listed : enumerate(*graph, /*with_mode_b=*/false)) {
    candidates.push_back(described_candidate(key, *graph, listed));
  }
  return candidates;
}

std::vector<KnobRange> engine_knob_ranges(const ConvKey& key, int64_t engine) {
  auto graph = make_graph(key, current_cudnn_handle());
  std::vector<fe::Knob> knobs;
  std::vector<KnobRange> ranges;
  if (graph->get_knobs_for_engine(engine, knobs).is_bad()) return ranges;
  for (const auto& knob : knobs) {
    cudnnBackendKnobType_t backend_type;
    if (fe::convert_to_backend_knob_type(knob.type, backend_type) != CUDNN_STATUS_SUCCESS) continue;
    ranges.push_back({static_cast<int64_t>(backend_type), knob.minValue, knob.maxValue,
                      std::max<int64_t>(1, knob.stride)});
  }
  return ranges;
}

}  // namespace torch_cudnn_algo
