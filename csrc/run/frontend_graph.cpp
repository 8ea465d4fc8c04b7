#include "run/frontend_graph.h"

#include <dlfcn.h>

#include <algorithm>
#include <set>
#include <sstream>

// Built with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, the frontend calls cuDNN
// through this handle (see bind_frontend_to_cudnn).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace torch_cudnn_algo {
namespace {

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

bool has(const std::vector<std::string>& notes, const char* name) {
  return std::find(notes.begin(), notes.end(), name) != notes.end();
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

}  // namespace

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

std::string message_of(fe::error_t status) {
  return status.get_message().empty() ? "cudnn_frontend error" : status.get_message();
}

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

std::vector<Listed> enumerate(ConvGraph& graph, bool with_mode_b) {
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

}  // namespace torch_cudnn_algo
