// The operators of a torch_cudnn_algo.Plan: staging its entries (with their
// serialized execution plans), putting it in force, what is in force; and the
// recording of the configurations a model runs, which tune() profiles.
#include "base/common.h"
#include "decide/config_recording.h"
#include "decide/flag_state.h"
#include "decide/plan.h"
#include "decide/selection.h"
#include "ops/conv_argument.h"
#include "ops/op_values.h"
#include "overrides/overrides.h"
#include "run/graph_runner.h"
#include "store/serialized_execution_plan.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <cstring>

namespace torch_cudnn_algo {
namespace {

// Blobs cross between Python and C++ as 1-d uint8 CPU tensors (a str would
// have to be UTF-8).
std::vector<uint8_t> bytes_of(const at::Tensor& tensor, const char* what) {
  TORCH_CHECK_VALUE(tensor.device().is_cpu() && tensor.scalar_type() == at::kByte &&
                        tensor.dim() == 1,
                    "torch_cudnn_algo: ", what, " must be a 1-d uint8 CPU tensor, got ",
                    tensor.scalar_type(), " of shape ", tensor.sizes(), " on ", tensor.device());
  const at::Tensor packed = tensor.contiguous();
  const auto* begin = packed.const_data_ptr<uint8_t>();
  return {begin, begin + packed.numel()};
}

at::Tensor tensor_of(const std::vector<uint8_t>& bytes) {
  at::Tensor tensor = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  if (!bytes.empty()) std::memcpy(tensor.mutable_data_ptr<uint8_t>(), bytes.data(), bytes.size());
  return tensor;
}

// Stages one entry of a torch_cudnn_algo.Plan (see plan.h). `choice` is a flag
// value, "" for stock's own path; `execution_plan`, if given, the choice's
// serialized execution plan (what serialized_execution_plan returned) made on
// an `execution_plan_gpu`. Needs no GPU.
void stage_plan_entry_op(const std::string& conv_json, const std::string& choice, const std::string& label,
                         const std::optional<at::Tensor>& execution_plan, const std::string& execution_plan_gpu) {
  const ConvKey key = user_conv_key(parse_conv_argument(conv_json), 0, /*deterministic=*/false,
                                    /*allow_tf32=*/false, at::Device(at::kCUDA, 0));
  std::shared_ptr<SerializedExecutionPlan> serialized;
  if (execution_plan.has_value()) {
    serialized = std::make_shared<SerializedExecutionPlan>();
    serialized->data = bytes_of(*execution_plan, "a built execution plan");
    serialized->gpu = execution_plan_gpu;
    serialized->label = label;
  }
  stage_plan_entry(key, choice, label, std::move(serialized));
}

// The execution plan of `choice` on a convolution (the current CUDA device
// builds it, if not built yet), serialized for a plan file: (uint8 tensor, "")
// or (empty tensor, why there is none).
std::tuple<at::Tensor, std::string> serialized_execution_plan_op(const std::string& conv_json, bool deterministic,
                                                                 bool allow_tf32, const std::string& choice_value) {
  const ConvArgument conv = parse_conv_argument(conv_json);
  const at::Device device = query_device(conv.input, "serialized_execution_plan");
  const ConvKey key = user_conv_key(conv, 0, deterministic, allow_tf32, device);
  const auto choice = choice_from_flag_value(choice_value);
  if (!choice->is_engine()) {
    return {tensor_of({}), choice->is_kernel() ? "our own kernels are in the library: nothing to serialise"
                                               : "a legacy algorithm has no execution plan to serialise"};
  }
  const c10::cuda::CUDAGuard device_guard(device);
  const auto serialized = serialize_execution_plan(*runner_for_choice(*choice, key));
  return {tensor_of(serialized.data), serialized.why_not};
}

// The plan entries in force as a JSON array of {"label", "choice" ("" =
// stock's path), "runs"}.
std::string plan_entries_in_force_op() {
  Json entries = Json::array();
  for (const auto& entry : plan_entries_in_force()) {
    Json row;
    row["label"] = entry->label;
    const Choice* choice = entry->choice.get();
    row["choice"] = !choice               ? ""
                    : choice->is_engine() ? choice->engine->canonical
                    : choice->is_kernel() ? choice->kernel
                                          : std::to_string(choice->legacy_algo);
    row["runs"] = entry->runs.load(std::memory_order_relaxed);
    entries.push_back(std::move(row));
  }
  return dump(entries);
}

// The labels of the plan entries in force that carry a serialized execution plan.
std::vector<std::string> plan_entries_with_execution_plan() {
  std::vector<std::string> labels;
  for (const auto& entry : plan_entries_in_force()) {
    if (entry->execution_plan) labels.push_back(entry->label);
  }
  return labels;
}

// Puts the staged plan in force and the overrides in line; if registering
// fails, the previous plan is back in force and the error propagates.
void commit_plan_op() {
  auto previous = commit_plan();
  try {
    refresh_overrides();
  } catch (...) {
    reinstate_plan(std::move(previous));
    refresh_overrides();
    throw;
  }
}

void set_config_recording_op(bool enabled) {
  set_config_recording(enabled);
  refresh_overrides();  // recording needs every direction's calls
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_cudnn_algo, m) {
  m.def("stage_plan_entry(str conv, str choice, str label, Tensor? execution_plan=None, "
        "str execution_plan_gpu='') -> ()",
        &stage_plan_entry_op);
  m.def("serialized_execution_plan(str conv, bool deterministic, bool allow_tf32, str choice) -> (Tensor, str)",
        &serialized_execution_plan_op);
  m.def("plan_entries_with_execution_plan() -> str[]", &plan_entries_with_execution_plan);
  m.def("commit_plan() -> ()", &commit_plan_op);
  m.def("discard_staged_plan() -> ()", &discard_staged_plan);
  m.def("plan_entries_in_force() -> str", &plan_entries_in_force_op);
  m.def("set_config_recording(bool enabled) -> ()", &set_config_recording_op);
  m.def("recorded_configs() -> str[]", &recorded_configs);
}

}  // namespace torch_cudnn_algo
