// Control surface of the extension, as torch.ops.torch_cudnn_algo.* operators.
// The Python package wraps these; they are not meant to be called directly.
#include "common.h"
#include "graph_runner.h"
#include "conv_key.h"
#include "legacy_algorithms.h"
#include "legacy_runner.h"
#include "overrides.h"
#include "selection.h"

#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

namespace torch_cudnn_algo {
namespace {

void set_legacy_algo(const std::string& direction, int64_t algo) {
  TORCH_CHECK_VALUE(algo >= kNoChoice && algo < 1024, "torch_cudnn_algo: algorithm ", algo,
                    " is out of range");
  set_pinned_legacy_algo(parse_direction(direction), static_cast<int>(algo));
}

int64_t get_legacy_algo(const std::string& direction) {
  const auto choice = pinned_choice(parse_direction(direction));
  return choice ? choice->legacy_algo : kNoChoice;
}

void set_engine(const std::string& direction, const std::string& name) {
  set_pinned_engine(parse_direction(direction), name);
}

std::string get_engine(const std::string& direction) {
  const auto choice = pinned_choice(parse_direction(direction));
  return choice ? choice->engine : "";
}

// The canonical form of an engine configuration name (ValueError if malformed).
std::string canonical_engine_name(const std::string& name) {
  return parse_engine_name(name).canonical;
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

void clear_plan_cache() {
  clear_legacy_plans();
  clear_graph_plans();
}

int64_t plan_cache_size() {
  return static_cast<int64_t>(legacy_plan_count() + graph_plan_count());
}

// The key of a user-level convolution (as F.convNd / F.conv_transposeNd take it)
// run in `direction` with `algo`; validates everything first.
ConvKey user_conv_key(const std::string& direction, int64_t algo, const at::Tensor& input,
                      const at::Tensor& weight, at::IntArrayRef padding, at::IntArrayRef stride,
                      at::IntArrayRef dilation, int64_t groups, bool transposed,
                      at::IntArrayRef output_padding, bool deterministic, bool allow_tf32) {
  const Direction dir = parse_direction(direction);
  TORCH_CHECK_VALUE(algo >= 0 && algo < legacy_algo_count(dir), "torch_cudnn_algo: ", direction,
                    " legacy algorithm must be in [0, ", legacy_algo_count(dir), "), got ", algo);
  TORCH_CHECK_VALUE(input.dim() != 3,
                    "torch_cudnn_algo: describe a 1-d convolution as 2-d [N, C, 1, L]");
  const auto format = stock_conv_memory_format(input, weight);
  if (!transposed) {
    check_conv_arguments(input, weight, padding, stride, dilation, groups);
    const ConvProblem problem{input.sizes(), weight.sizes(), padding, stride, dilation, groups};
    return make_conv_key(dir, static_cast<int>(algo), problem, input.scalar_type(),
                         input.device(), deterministic, allow_tf32, format);
  }
  check_transposed_arguments(input, weight, padding, output_padding, stride, dilation, groups);
  const auto x_sizes = conv_transpose_output_sizes(input.sizes(), weight.sizes(), padding,
                                                   output_padding, stride, dilation, groups);
  const ConvProblem problem{at::IntArrayRef(x_sizes.data(), input.dim()), weight.sizes(), padding,
                            stride, dilation, groups, /*transposed=*/true, output_padding};
  return make_conv_key(dir, static_cast<int>(algo), problem, input.scalar_type(), input.device(),
                       deterministic, allow_tf32, format);
}

// Workspace bytes `algo` needs for this convolution, or -1 when cuDNN does not
// support it. Queries cuDNN only; executes nothing.
int64_t legacy_workspace_size_op(const std::string& direction, const at::Tensor& input,
                                 const at::Tensor& weight, at::IntArrayRef padding,
                                 at::IntArrayRef stride, at::IntArrayRef dilation,
                                 int64_t groups, bool transposed, at::IntArrayRef output_padding,
                                 bool allow_tf32, int64_t algo) {
  TORCH_CHECK(input.is_cuda(), "torch_cudnn_algo: legacy_workspace_size needs CUDA tensors");
  const ConvKey key = user_conv_key(direction, algo, input, weight, padding, stride, dilation,
                                    groups, transposed, output_padding, /*deterministic=*/false,
                                    allow_tf32);
  if (!legacy_algo_is_implemented(key.dir(), key.algo)) return -1;
  const c10::cuda::CUDAGuard device_guard(input.device());
  const auto bytes = legacy_workspace_size(key);
  return bytes ? static_cast<int64_t>(*bytes) : -1;
}

// The description and Python repro a refusal would print for this convolution.
// Needs no GPU: only sizes, dtype and layout are read (meta tensors work).
std::tuple<std::string, std::string> describe_convolution(
    const std::string& direction, int64_t algo, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef padding, at::IntArrayRef stride, at::IntArrayRef dilation, int64_t groups,
    bool transposed, at::IntArrayRef output_padding, bool deterministic, bool allow_tf32,
    bool strict) {
  const ConvKey key = user_conv_key(direction, algo, input, weight, padding, stride, dilation,
                                    groups, transposed, output_padding, deterministic, allow_tf32);
  return {describe_conv(key),
          python_repro(key, std::to_string(algo) + "  # " + legacy_algo_name(key.dir(), key.algo),
                       strict)};
}

using EngineTable = std::tuple<std::vector<std::string>, std::vector<std::string>,
                               std::vector<int64_t>, std::vector<std::string>,
                               std::vector<std::string>, std::vector<std::string>,
                               std::vector<std::string>>;

// The engine configurations cuDNN offers for a convolution, as columns: name,
// source, workspace bytes (-1 unknown), numerical notes, behaviour notes, knob
// space, refusal under the current precision/determinism settings.
EngineTable engine_configs(const std::string& direction, const at::Tensor& input,
                           const at::Tensor& weight, at::IntArrayRef padding,
                           at::IntArrayRef stride, at::IntArrayRef dilation, int64_t groups,
                           bool transposed, at::IntArrayRef output_padding, bool deterministic,
                           bool allow_tf32) {
  TORCH_CHECK(input.is_cuda(), "torch_cudnn_algo: engine_configs needs CUDA tensors");
  const ConvKey key = user_conv_key(direction, 0, input, weight, padding, stride, dilation,
                                    groups, transposed, output_padding, deterministic, allow_tf32);
  const c10::cuda::CUDAGuard device_guard(input.device());
  EngineTable table;
  auto& [names, sources, workspaces, numerical, behavior, knobs, refusals] = table;
  const auto join = [](const std::vector<std::string>& notes) {
    std::string out;
    for (const auto& note : notes) out += (out.empty() ? "" : ",") + note;
    return out;
  };
  for (const auto& candidate : list_engine_candidates(key)) {
    names.push_back(candidate.name);
    sources.push_back(candidate.source);
    workspaces.push_back(candidate.workspace);
    numerical.push_back(join(candidate.numerical_notes));
    behavior.push_back(join(candidate.behavior_notes));
    knobs.push_back(candidate.knob_space);
    refusals.push_back(candidate.refusal);
  }
  return table;
}

int64_t cudnn_runtime_version() {
  return static_cast<int64_t>(cudnnGetVersion());
}

}  // namespace

TORCH_LIBRARY(torch_cudnn_algo, m) {
  m.def("set_legacy_algo(str direction, int algo) -> ()", &set_legacy_algo);
  m.def("get_legacy_algo(str direction) -> int", &get_legacy_algo);
  m.def("set_engine(str direction, str name) -> ()", &set_engine);
  m.def("get_engine(str direction) -> str", &get_engine);
  m.def("canonical_engine_name(str name) -> str", &canonical_engine_name);
  m.def("set_strict(bool strict) -> ()", &set_strict);
  m.def("get_strict() -> bool", &get_strict);
  m.def("legacy_algo_names(str direction) -> str[]", &get_legacy_algo_names);
  m.def("active_overrides() -> str[]", &get_active_overrides);
  m.def("clear_plan_cache() -> ()", &clear_plan_cache);
  m.def("plan_cache_size() -> int", &plan_cache_size);
  m.def(
      "legacy_workspace_size(str direction, Tensor input, Tensor weight, int[] padding, "
      "int[] stride, int[] dilation, int groups, bool transposed, int[] output_padding, "
      "bool allow_tf32, int algo) -> int",
      &legacy_workspace_size_op);
  m.def(
      "describe_convolution(str direction, int algo, Tensor input, Tensor weight, int[] padding, "
      "int[] stride, int[] dilation, int groups, bool transposed, int[] output_padding, "
      "bool deterministic, bool allow_tf32, bool strict) -> (str, str)",
      &describe_convolution);
  m.def(
      "engine_configs(str direction, Tensor input, Tensor weight, int[] padding, int[] stride, "
      "int[] dilation, int groups, bool transposed, int[] output_padding, bool deterministic, "
      "bool allow_tf32) -> (str[], str[], int[], str[], str[], str[], str[])",
      &engine_configs);
  m.def("cudnn_runtime_version() -> int", &cudnn_runtime_version);
}

}  // namespace torch_cudnn_algo
