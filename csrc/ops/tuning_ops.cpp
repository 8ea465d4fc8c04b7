// The operators of tune(): the "fastest" decision on one convolution (kept in
// the tuning database), building ahead, the tuning log, the compile workers
// and the execution plan cache.
#include "base/common.h"
#include "base/python_bridge.h"
#include "decide/flag_state.h"
#include "decide/kept_decisions.h"
#include "decide/tuner/fastest_tuner.h"
#include "ops/conv_argument.h"
#include "ops/op_values.h"
#include "run/compile_workers.h"
#include "store/execution_plan_cache.h"

#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace torch_cudnn_algo {
namespace {

std::vector<std::string> tuning_log_op() {
  return tuning_log_entries();
}

// Decides one convolution under "fastest" (the current CUDA device runs it):
// the tuning database's decision unless `retune`, else the tuner's, kept in
// the database; returns the tuning-log entry (JSON; a kept decision's
// recorded fields with "kept": true). The process does not remember it:
// tune() puts it in a plan.
std::string tune_fastest_conv(const std::string& conv_json, bool deterministic, bool allow_tf32, bool retune) {
  const ConvArgument conv = parse_conv_argument(conv_json);
  const at::Device device = query_device(conv.input, "tune_fastest_conv");
  const ConvKey key = user_conv_key(conv, 0, deterministic, allow_tf32, device);
  const c10::cuda::CUDAGuard device_guard(device);
  TORCH_CHECK(c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None,
              "torch_cudnn_algo: cannot tune during CUDA graph capture");
  const BypassGuard bypass;  // the tuner's float64 reference runs stock
  std::string entry;
  decide_fastest(key, retune, &entry);
  return entry;
}

bool fastest_decision_kept(const std::string& conv_json, bool deterministic, bool allow_tf32) {
  const ConvArgument conv = parse_conv_argument(conv_json);
  const at::Device device = query_device(conv.input, "fastest_decision_kept");
  const c10::cuda::CUDAGuard device_guard(device);
  return has_kept_decision(user_conv_key(conv, 0, deterministic, allow_tf32, device));
}

// The tuning database's key of the convolution's "fastest" decision under the
// settings in force (the job coordinator's name for it; nothing is built).
std::string fastest_decision_key(const std::string& conv_json, bool deterministic, bool allow_tf32) {
  const ConvArgument conv = parse_conv_argument(conv_json);
  const at::Device device = query_device(conv.input, "fastest_decision_key");
  const c10::cuda::CUDAGuard device_guard(device);
  return decision_key(user_conv_key(conv, 0, deterministic, allow_tf32, device));
}

c10::Dict<std::string, int64_t> kept_decision_counts_op() {
  const auto c = kept_decision_counts();
  return counts_dict({{"kept", c.kept},
                      {"tuned", c.tuned},
                      {"waited", c.waited},
                      {"borrowed", c.borrowed},
                      {"adopted", c.adopted},
                      {"shared", c.shared}});
}

// Queues one convolution's "fastest" candidate builds to background threads
// (tune() calls it for every configuration before tuning the first); nothing
// runs on the GPU.
void prepare_fastest_conv(const std::string& conv_json, bool deterministic, bool allow_tf32) {
  const ConvArgument conv = parse_conv_argument(conv_json);
  const at::Device device = query_device(conv.input, "prepare_fastest_conv");
  prepare_fastest(user_conv_key(conv, 0, deterministic, allow_tf32, device));
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

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_cudnn_algo, m) {
  m.def("tuning_log() -> str[]", &tuning_log_op);
  m.def("tune_fastest_conv(str conv, bool deterministic, bool allow_tf32, bool retune=False) -> str",
        &tune_fastest_conv);
  m.def("fastest_decision_kept(str conv, bool deterministic, bool allow_tf32) -> bool", &fastest_decision_kept);
  m.def("fastest_decision_key(str conv, bool deterministic, bool allow_tf32) -> str", &fastest_decision_key);
  m.def("kept_decision_counts() -> Dict(str, int)", &kept_decision_counts_op);
  m.def("prepare_fastest_conv(str conv, bool deterministic, bool allow_tf32) -> ()", &prepare_fastest_conv);
  m.def("cancel_prepared_fastest() -> ()", &cancel_prepared_fastest);
  m.def("enable_compile_workers(str[] command, int count) -> ()", &enable_compile_workers_op);
  m.def("disable_compile_workers() -> ()", &disable_compile_workers_op);
  m.def("compile_worker_counts() -> Dict(str, int)", &compile_worker_counts_op);
  m.def("execution_plan_cache_dir() -> str", &execution_plan_cache_dir);
  m.def("execution_plan_cache_counts() -> Dict(str, int)", &execution_plan_cache_counts_op);
}

}  // namespace torch_cudnn_algo
