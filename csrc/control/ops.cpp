// Control surface of the extension, as torch.ops.torch_cudnn_algo.* operators.
// The Python package wraps these; they are not meant to be called directly.
#include "base/common.h"
#include "base/conv_key.h"
#include "base/cudnn_handle.h"
#include "base/legacy_algorithms.h"
#include "base/python_bridge.h"
#include "control/conv_argument.h"
#include "control/overrides.h"
#include "decide/config_recording.h"
#include "decide/fastest_tuner.h"
#include "decide/pins.h"
#include "decide/plan.h"
#include "decide/profiling.h"
#include "decide/selection.h"
#include "run/compile_workers.h"
#include "run/engine_enumeration.h"
#include "run/engine_name.h"
#include "run/graph_build.h"
#include "run/graph_runner.h"
#include "run/legacy_runner.h"
#include "store/execution_plan_cache.h"
#include "store/serialized_execution_plan.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn_frontend/thirdparty/nlohmann/json.hpp>
#include <cudnn_frontend_version.h>
#include <torch/library.h>

#include <cstring>
#include <initializer_list>

#include <tuple>
#include <unordered_map>

namespace torch_cudnn_algo {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written

// A result as JSON text, the one encoding of structured results.
std::string dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void set_legacy_algo(const std::string& direction, int64_t algo) {
  TORCH_CHECK_VALUE(algo >= kNoChoice && algo < 1024, "torch_cudnn_algo: algorithm ", algo,
                    " is out of range");
  const Direction dir = parse_direction(direction);
  pin_choice(dir, legacy_algo_choice(dir, static_cast<int>(algo)));
}

int64_t get_legacy_algo(const std::string& direction) {
  const auto choice = pinned_choice(parse_direction(direction));
  return choice ? choice->legacy_algo : kNoChoice;
}

void set_engine(const std::string& direction, const std::string& name) {
  const Direction dir = parse_direction(direction);
  pin_choice(dir, engine_choice(name));
}

std::string get_engine(const std::string& direction) {
  const auto choice = pinned_choice(parse_direction(direction));
  return choice ? choice->engine : "";
}

// The canonical form of an engine configuration name (ValueError if malformed).
std::string canonical_engine_name(const std::string& name) {
  return parse_engine_name(name).canonical;
}

void set_policy(const std::string& direction, const std::string& policy) {
  const Direction dir = parse_direction(direction);
  pin_choice(dir, policy_choice(policy));
}

std::string get_policy(const std::string& direction) {
  const auto choice = pinned_choice(parse_direction(direction));
  return choice && choice->fastest ? "fastest" : "";
}

void set_workspace_limit_op(int64_t bytes) {
  if (exchange_workspace_limit(bytes) != bytes) {
    clear_profile_decisions();  // the policy's picks were made under the old limit
  }
  invalidate_selections();
}

int64_t get_workspace_limit() {
  return workspace_limit();
}

void set_profile(bool enabled) {
  set_profile_mode(enabled);
  resync_overrides();
}

bool get_profile() {
  return profile_mode();
}

bool set_thread_bypass(bool bypass) {
  return exchange_bypass(bypass);
}

std::vector<std::string> tuning_log_op() {
  return tuning_log_entries();
}

void set_knob_search_op(bool enabled) {
  if (exchange_knob_search(enabled) != enabled) {
    clear_profile_decisions();  // decisions were made with the other search
  }
}

bool get_knob_search() {
  return knob_search_enabled();
}

double tuner_tolerance_op(const std::string& dtype, bool allow_tf32) {
  static const std::unordered_map<std::string, at::ScalarType> dtypes = {
      {"float16", at::kHalf}, {"bfloat16", at::kBFloat16}, {"float32", at::kFloat},
      {"float64", at::kDouble}};
  const auto it = dtypes.find(dtype);
  TORCH_CHECK_VALUE(it != dtypes.end(), "torch_cudnn_algo: no tuner tolerance for dtype '", dtype,
                    "'; expected float16, bfloat16, float32 or float64");
  return tuner_tolerance(it->second, allow_tf32);
}

int64_t profile_decision_count_op() {
  return static_cast<int64_t>(profile_decision_count());
}

void set_strict(bool strict) {
  set_strict_mode(strict);
}

bool get_strict() {
  return strict_mode();
}

std::vector<std::string> get_legacy_algo_names(const std::string& direction) {
  return legacy_algo_names(parse_direction(direction));
}

std::vector<std::string> get_active_overrides() {
  return registered_override_names();
}

void clear_runner_cache() {
  cancel_prepared_fastest();  // its threads fill the graph runner cache
  clear_legacy_runners();
  clear_graph_runners();
  clear_profile_decisions();
  clear_tuning_log();
}

int64_t runner_cache_size() {
  return static_cast<int64_t>(legacy_runner_count() + graph_runner_count());
}

// Workspace bytes `algo` needs for this convolution, or -1 when cuDNN does not
// support it. Queries cuDNN only; executes nothing.
int64_t legacy_workspace_size_op(const std::string& conv_json, bool allow_tf32, int64_t algo) {
  const ConvArgument conv = parse_conv_argument(conv_json);
  const at::Device device = query_device(conv.input, "legacy_workspace_size");
  const ConvKey key = user_conv_key(conv, algo, /*deterministic=*/false, allow_tf32, device);
  if (!legacy_algo_is_implemented(key.dir(), key.algo)) return -1;
  const c10::cuda::CUDAGuard device_guard(device);
  const auto bytes = legacy_workspace_size(key);
  return bytes ? static_cast<int64_t>(*bytes) : -1;
}

// The description and Python repro a refusal would print for this convolution.
// Needs no GPU: only sizes, dtype and layout are read (meta tensors work).
std::tuple<std::string, std::string> describe_convolution(const std::string& conv_json, int64_t algo,
                                                          bool deterministic, bool allow_tf32, bool strict) {
  const ConvKey key = user_conv_key(parse_conv_argument(conv_json), algo, deterministic, allow_tf32);
  return {describe_conv(key),
          python_repro(key, std::to_string(algo) + "  # " + legacy_algo_name(key.dir(), key.algo),
                       strict)};
}

// The engine configurations cuDNN offers for a convolution, as a JSON array of
// {"name", "source", "workspace" (bytes, -1 unknown), "numerical_notes",
// "behavior_notes", "knob_space", "refusal" (under the current
// precision/determinism settings, "" for none)}.
std::string engine_configs(const std::string& conv_json, bool deterministic, bool allow_tf32) {
  const ConvArgument conv = parse_conv_argument(conv_json);
  const at::Device device = query_device(conv.input, "engine_configs");
  const ConvKey key = user_conv_key(conv, 0, deterministic, allow_tf32, device);
  const c10::cuda::CUDAGuard device_guard(device);
  Json table = Json::array();
  for (const auto& candidate : list_engine_candidates(key)) {
    Json row;
    row["name"] = candidate.name;
    row["source"] = candidate.source;
    row["workspace"] = candidate.workspace;
    row["numerical_notes"] = candidate.numerical_notes;
    row["behavior_notes"] = candidate.behavior_notes;
    row["knob_space"] = candidate.knob_space;
    row["refusal"] = candidate.refusal;
    table.push_back(std::move(row));
  }
  return dump(table);
}

// The cuDNN problem of a user-level convolution, as the profiler reads it (a
// JSON object, see json_request), and its one-line description.
std::tuple<std::string, std::string> conv_request(const std::string& conv_json, bool deterministic,
                                                  bool allow_tf32) {
  const ConvArgument conv = parse_conv_argument(conv_json);
  const ConvKey key = user_conv_key(conv, 0, deterministic, allow_tf32, query_device(conv.input, "profile"));
  return {json_request(key), describe_conv(key)};
}

// Builds (cached) the runner of one candidate on a cuDNN problem and, with
// `execute`, runs it once on the current stream, writing `out`. Returns
// ("ok" | "unsupported: <why>" | "refused: <rule>", workspace bytes or -1).
// An allocation failure raises torch.OutOfMemoryError. No rule beyond the
// runner's own refusal is applied (the profiler applies the workspace limit).
std::tuple<std::string, int64_t> run_candidate(
    const std::string& direction, const std::string& choice_value, const at::Tensor& a,
    const at::Tensor& b, const at::Tensor& out, at::IntArrayRef padding, at::IntArrayRef stride,
    at::IntArrayRef dilation, int64_t groups, bool deterministic, bool allow_tf32, bool execute) {
  const Direction dir = parse_direction(direction);
  const auto choice = choice_from_flag_value(choice_value);
  TORCH_CHECK_VALUE(choice->is_engine() || (choice->legacy_algo < legacy_algo_count(dir) &&
                                            legacy_algo_is_implemented(dir, choice->legacy_algo)),
                    "torch_cudnn_algo: ", choice_value, " is not a ", direction,
                    " legacy algorithm cuDNN implements");
  const ConvKey key = candidate_key(dir, a, b, out, padding, stride, dilation, groups,
                                    deterministic, allow_tf32);
  const c10::cuda::CUDAGuard device_guard(a.device());
  const auto runner = runner_for_choice(*choice, key);
  if (!runner->refusal.empty()) {
    return {(runner->refused_by_rule ? "refused: " : "unsupported: ") + runner->refusal, -1};
  }
  if (execute) {
    const c10::DataPtr workspace = allocate_workspace(runner->workspace_bytes);
    runner->run(a, b, out, workspace.get());
  }
  return {"ok", static_cast<int64_t>(runner->workspace_bytes)};
}

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
    return {tensor_of({}), "a legacy algorithm has no execution plan to serialise"};
  }
  const c10::cuda::CUDAGuard device_guard(device);
  const auto serialized = serialize_execution_plan(*runner_for_choice(*choice, key));
  return {tensor_of(serialized.data), serialized.why_not};
}

// Named counters as the Dict(str, int) the Python side reads.
c10::Dict<std::string, int64_t> counts_dict(std::initializer_list<std::pair<const char*, int64_t>> counts) {
  c10::Dict<std::string, int64_t> out;
  for (const auto& [name, value] : counts) out.insert(name, value);
  return out;
}

c10::Dict<std::string, int64_t> execution_plan_counts_op() {
  const auto c = execution_plan_counts();
  return counts_dict({{"built", c.built},
                      {"built_by_heuristics", c.built_by_heuristics},
                      {"deserialized", c.deserialized},
                      {"prefetched", c.prefetched},
                      {"deserialize_failed", c.deserialize_failed},
                      {"build_us", c.build_us},
                      {"deserialize_us", c.deserialize_us}});
}

void enable_compile_workers_op(std::vector<std::string> command, int64_t count) {
  TORCH_CHECK_VALUE(count >= 0, "torch_cudnn_algo: compile workers must be 0 or more, got ", count);
  enable_compile_workers(std::move(command), count);
}

void disable_compile_workers_op() {
  const WithoutGil unlocked;  // waits for builds in flight
  disable_compile_workers();
}

c10::Dict<std::string, int64_t> compile_worker_counts_op() {
  const auto c = compile_worker_counts();
  return counts_dict(
      {{"started", c.started}, {"ready", c.ready}, {"builds", c.builds}, {"failed_builds", c.failed_builds}});
}

c10::Dict<std::string, int64_t> execution_plan_cache_counts_op() {
  const auto c = execution_plan_cache_counts();
  return counts_dict(
      {{"loaded", c.loaded}, {"saved", c.saved}, {"rejected", c.rejected}, {"save_failed", c.save_failed}});
}

// The graph runners built or deserialized so far, as a JSON array of
// {"direction", "conv" (its description), "engine" (the name asked for),
// "choice" (the configuration run), "refusal", "workspace" (bytes),
// "deserialized"}.
std::string graph_runners() {
  Json runners = Json::array();
  for (const auto& summary : graph_runner_summaries()) {
    Json row;
    row["direction"] = direction_name(summary.key.dir());
    row["conv"] = describe_conv(summary.key);
    row["engine"] = summary.engine;
    row["choice"] = summary.choice;
    row["refusal"] = summary.refusal;
    row["workspace"] = summary.workspace;
    row["deserialized"] = summary.deserialized;
    runners.push_back(std::move(row));
  }
  return dump(runners);
}

int64_t cudnn_frontend_version() {
  return CUDNN_FRONTEND_VERSION;
}

// The plan entries in force as a JSON array of {"label", "choice" ("" =
// stock's path), "runs"}.
std::string plan_entries_in_force_op() {
  Json entries = Json::array();
  for (const auto& entry : plan_entries_in_force()) {
    Json row;
    row["label"] = entry->label;
    const Choice* choice = entry->choice.get();
    row["choice"] = !choice ? "" : choice->is_engine() ? choice->engine : std::to_string(choice->legacy_algo);
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

// Runs the "fastest" tuner on one convolution (meta tensors describe it; the
// current CUDA device runs it) and returns its tuning-log entry (JSON). The
// decision is not remembered: tune() puts it in a plan.
std::string tune_fastest_conv(const std::string& conv_json, bool deterministic, bool allow_tf32) {
  const ConvArgument conv = parse_conv_argument(conv_json);
  const at::Device device = query_device(conv.input, "tune_fastest_conv");
  const ConvKey key = user_conv_key(conv, 0, deterministic, allow_tf32, device);
  const c10::cuda::CUDAGuard device_guard(device);
  TORCH_CHECK(c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None,
              "torch_cudnn_algo: cannot tune during CUDA graph capture");
  const BypassGuard bypass;  // the tuner's float64 reference runs stock
  std::string entry;
  tune_fastest(key, &entry);
  return entry;
}

// Queues one convolution's "fastest" candidate builds to background threads
// (tune() calls it for every configuration before tuning the first); nothing
// runs on the GPU.
void prepare_fastest_conv(const std::string& conv_json, bool deterministic, bool allow_tf32) {
  const ConvArgument conv = parse_conv_argument(conv_json);
  const at::Device device = query_device(conv.input, "prepare_fastest_conv");
  prepare_fastest(user_conv_key(conv, 0, deterministic, allow_tf32, device));
}

std::vector<int64_t> pinned_run_counts_op() {
  const auto counts = pinned_run_counts();
  return {counts.begin(), counts.end()};
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

int64_t cudnn_runtime_version() {
  return static_cast<int64_t>(cudnnGetVersion());
}

}  // namespace

TORCH_LIBRARY(torch_cudnn_algo, m) {
  // A convolution crosses as one JSON object (see control/conv_argument.h);
  // structured results cross as JSON text.
  m.def("set_legacy_algo(str direction, int algo) -> ()", &set_legacy_algo);
  m.def("get_legacy_algo(str direction) -> int", &get_legacy_algo);
  m.def("set_engine(str direction, str name) -> ()", &set_engine);
  m.def("get_engine(str direction) -> str", &get_engine);
  m.def("canonical_engine_name(str name) -> str", &canonical_engine_name);
  m.def("set_strict(bool strict) -> ()", &set_strict);
  m.def("get_strict() -> bool", &get_strict);
  m.def("legacy_algo_names(str direction) -> str[]", &get_legacy_algo_names);
  m.def("active_overrides() -> str[]", &get_active_overrides);
  m.def("clear_runner_cache() -> ()", &clear_runner_cache);
  m.def("runner_cache_size() -> int", &runner_cache_size);
  m.def("legacy_workspace_size(str conv, bool allow_tf32, int algo) -> int", &legacy_workspace_size_op);
  m.def("describe_convolution(str conv, int algo, bool deterministic, bool allow_tf32, bool strict) -> (str, str)",
        &describe_convolution);
  m.def("engine_configs(str conv, bool deterministic, bool allow_tf32) -> str", &engine_configs);
  m.def("cudnn_runtime_version() -> int", &cudnn_runtime_version);
  m.def("pinned_run_counts() -> int[]", &pinned_run_counts_op);
  m.def("set_policy(str direction, str policy) -> ()", &set_policy);
  m.def("get_policy(str direction) -> str", &get_policy);
  m.def("set_workspace_limit(int bytes) -> ()", &set_workspace_limit_op);
  m.def("get_workspace_limit() -> int", &get_workspace_limit);
  m.def("set_profile(bool enabled) -> ()", &set_profile);
  m.def("get_profile() -> bool", &get_profile);
  m.def("set_thread_bypass(bool bypass) -> bool", &set_thread_bypass);
  m.def("profile_decision_count() -> int", &profile_decision_count_op);
  m.def("tuning_log() -> str[]", &tuning_log_op);
  m.def("set_knob_search(bool enabled) -> ()", &set_knob_search_op);
  m.def("get_knob_search() -> bool", &get_knob_search);
  m.def("tuner_tolerance(str dtype, bool allow_tf32) -> float", &tuner_tolerance_op);
  m.def("conv_request(str conv, bool deterministic, bool allow_tf32) -> (str, str)", &conv_request);
  m.def(
      "run_candidate(str direction, str choice, Tensor a, Tensor b, Tensor(a!) out, int[] padding, "
      "int[] stride, int[] dilation, int groups, bool deterministic, bool allow_tf32, "
      "bool execute) -> (str, int)",
      &run_candidate);
  m.def("stage_plan_entry(str conv, str choice, str label, Tensor? execution_plan=None, "
        "str execution_plan_gpu='') -> ()",
        &stage_plan_entry_op);
  m.def("serialized_execution_plan(str conv, bool deterministic, bool allow_tf32, str choice) -> (Tensor, str)",
        &serialized_execution_plan_op);
  m.def("execution_plan_counts() -> Dict(str, int)", &execution_plan_counts_op);
  m.def("plan_entries_with_execution_plan() -> str[]", &plan_entries_with_execution_plan);
  m.def("graph_runners() -> str", &graph_runners);
  m.def("cudnn_frontend_version() -> int", &cudnn_frontend_version);
  m.def("commit_plan() -> ()", &commit_plan_op);
  m.def("discard_staged_plan() -> ()", &discard_staged_plan);
  m.def("plan_entries_in_force() -> str", &plan_entries_in_force_op);
  m.def("set_config_recording(bool enabled) -> ()", &set_config_recording_op);
  m.def("recorded_configs() -> str[]", &recorded_configs);
  m.def("tune_fastest_conv(str conv, bool deterministic, bool allow_tf32) -> str", &tune_fastest_conv);
  m.def("prepare_fastest_conv(str conv, bool deterministic, bool allow_tf32) -> ()", &prepare_fastest_conv);
  m.def("cancel_prepared_fastest() -> ()", &cancel_prepared_fastest);
  m.def("enable_compile_workers(str[] command, int count) -> ()", &enable_compile_workers_op);
  m.def("disable_compile_workers() -> ()", &disable_compile_workers_op);
  m.def("compile_worker_counts() -> Dict(str, int)", &compile_worker_counts_op);
  m.def("execution_plan_cache_dir() -> str", &execution_plan_cache_dir);
  m.def("execution_plan_cache_counts() -> Dict(str, int)", &execution_plan_cache_counts_op);
}

}  // namespace torch_cudnn_algo
