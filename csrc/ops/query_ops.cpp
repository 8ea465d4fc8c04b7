// The query operators: what cuDNN offers or needs for a convolution, what the
// extension built and counted, the versions it runs with, and run_candidate,
// through which the Python profiler times a candidate.
#include "base/common.h"
#include "base/conv_key.h"
#include "base/cudnn_handle.h"
#include "base/legacy_algorithms.h"
#include "decide/flag_state.h"
#include "decide/kept_decisions.h"
#include "decide/profiling.h"
#include "decide/selection.h"
#include "decide/tuner/fastest_tuner.h"
#include "ops/conv_argument.h"
#include "ops/op_values.h"
#include "run/direct_runner.h"
#include "run/engine_enumeration.h"
#include "run/graph_runner_source.h"
#include "run/legacy_runner.h"
#include "store/serialized_execution_plan.h"

#include <c10/cuda/CUDAGuard.h>
#include <cudnn_frontend_version.h>
#include <torch/library.h>
#include <unordered_map>

namespace torch_cudnn_algo {
namespace {

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

void clear_runner_cache() {
  cancel_prepared_fastest();  // its threads fill the graph runner cache
  clear_legacy_runners();
  clear_graph_runners();
  clear_direct_runners();
  clear_profile_decisions();
  clear_tuning_log();
  clear_wide_search_record();
  clear_borrow_anchors();
}

int64_t runner_cache_size() {
  return static_cast<int64_t>(legacy_runner_count() + graph_runner_count() + direct_runner_count());
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
// Needs no GPU: only sizes, dtype and layout are read.
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

// Our own kernels for a convolution, as a JSON array of {"name", "workspace"
// (bytes, -1 when it cannot run), "refusal" ("" for none)}: listed in every
// build, a build without them saying so in the refusal. They are
// deterministic and accumulate in fp32 (fp64 for fp64), without TF32.
std::string own_kernels(const std::string& conv_json, bool deterministic, bool allow_tf32) {
  Json table = Json::array();
  const ConvArgument conv = parse_conv_argument(conv_json);
  const at::Device device = query_device(conv.input, "own_kernels");
  ConvKey key = user_conv_key(conv, 0, deterministic, allow_tf32, device);
  key.algo = kNoChoice;
  const c10::cuda::CUDAGuard device_guard(device);
  bool created = false;
  const auto runner = get_direct_runner(key, &created);
  Json row;
  row["name"] = kDirectKernelName;
  row["workspace"] = runner->refusal.empty() ? static_cast<int64_t>(runner->workspace_bytes) : int64_t{-1};
  row["refusal"] = runner->refusal;
  table.push_back(std::move(row));
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
  TORCH_CHECK_VALUE(choice->is_engine() || choice->is_kernel() || (choice->legacy_algo < legacy_algo_count(dir) &&
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

std::vector<int64_t> pinned_run_counts_op() {
  const auto counts = pinned_run_counts();
  return {counts.begin(), counts.end()};
}

int64_t cudnn_runtime_version() {
  return static_cast<int64_t>(cudnnGetVersion());
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_cudnn_algo, m) {
  m.def("clear_runner_cache() -> ()", &clear_runner_cache);
  m.def("runner_cache_size() -> int", &runner_cache_size);
  m.def("legacy_workspace_size(str conv, bool allow_tf32, int algo) -> int", &legacy_workspace_size_op);
  m.def("describe_convolution(str conv, int algo, bool deterministic, bool allow_tf32, bool strict) -> (str, str)",
        &describe_convolution);
  m.def("engine_configs(str conv, bool deterministic, bool allow_tf32) -> str", &engine_configs);
  m.def("own_kernels(str conv, bool deterministic, bool allow_tf32) -> str", &own_kernels);
  m.def("own_kernels_built() -> bool", &own_kernels_built);
  m.def("cudnn_runtime_version() -> int", &cudnn_runtime_version);
  m.def("pinned_run_counts() -> int[]", &pinned_run_counts_op);
  m.def("profile_decision_count() -> int", &profile_decision_count_op);
  m.def("tuner_tolerance(str dtype, bool allow_tf32) -> float", &tuner_tolerance_op);
  m.def("conv_request(str conv, bool deterministic, bool allow_tf32) -> (str, str)", &conv_request);
  m.def(
      "run_candidate(str direction, str choice, Tensor a, Tensor b, Tensor(a!) out, int[] padding, "
      "int[] stride, int[] dilation, int groups, bool deterministic, bool allow_tf32, "
      "bool execute) -> (str, int)",
      &run_candidate);
  m.def("execution_plan_counts() -> Dict(str, int)", &execution_plan_counts_op);
  m.def("graph_runners() -> str", &graph_runners);
  m.def("cudnn_frontend_version() -> int", &cudnn_frontend_version);
}

}  // namespace torch_cudnn_algo
