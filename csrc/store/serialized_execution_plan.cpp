#include "store/serialized_execution_plan.h"


#include <ATen/cuda/CUDAContext.h>
#include <cudnn_frontend/thirdparty/nlohmann/json.hpp>

namespace torch_cudnn_algo {
namespace {

// Relaxed: counts for tests and reports, ordered by nothing.
std::atomic<int64_t> g_built{0};
std::atomic<int64_t> g_built_by_heuristics{0};
std::atomic<int64_t> g_deserialized{0};
std::atomic<int64_t> g_prefetched{0};
std::atomic<int64_t> g_deserialize_failed{0};
std::atomic<int64_t> g_build_us{0};
std::atomic<int64_t> g_deserialize_us{0};

}  // namespace

void check_serialized_execution_plan(const SerializedExecutionPlan& blob) {
  // from_ubjson without exceptions: garbage gives a "discarded" value.
  const auto parsed = nlohmann::json::from_ubjson(blob.data, /*strict=*/true,
                                                  /*allow_exceptions=*/false);
  std::string problem;
  if (parsed.is_discarded()) {
    problem = "it is not UBJSON";
  } else if (!parsed.is_object()) {
    problem = "it is not a UBJSON object";
  } else if (!parsed.contains("cudnn_backend_data") || !parsed["cudnn_backend_data"].is_string()) {
    problem = "it holds no cuDNN execution plan (\"cudnn_backend_data\")";
  } else if (!parsed.contains("variant_pack_uids") || !parsed["variant_pack_uids"].is_array()) {
    problem = "it names no tensor uids (\"variant_pack_uids\")";
  } else if (!parsed.contains("behavior_notes") || !parsed["behavior_notes"].is_array()) {
    problem = "it has no behaviour notes (\"behavior_notes\")";
  }
  TORCH_CHECK_VALUE(problem.empty(), "torch_cudnn_algo: the plan entry '", blob.label,
                    "' carries a corrupt built execution plan: ", problem);
}

std::string gpu_model_name(int device) {
  return at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device))->name;
}

void count_execution_plan_built(int64_t us) {
  g_built.fetch_add(1, std::memory_order_relaxed);
  g_build_us.fetch_add(us, std::memory_order_relaxed);
}

void count_execution_plan_built_by_heuristics() {
  g_built_by_heuristics.fetch_add(1, std::memory_order_relaxed);
}

void add_execution_plan_deserialize_us(int64_t us) {
  g_deserialize_us.fetch_add(us, std::memory_order_relaxed);
}

void count_execution_plan_deserialized(bool prefetched) {
  g_deserialized.fetch_add(1, std::memory_order_relaxed);
  if (prefetched) g_prefetched.fetch_add(1, std::memory_order_relaxed);
}

void count_execution_plan_deserialize_failed() {
  g_deserialize_failed.fetch_add(1, std::memory_order_relaxed);
}

ExecutionPlanCounts execution_plan_counts() {
  return {g_built.load(std::memory_order_relaxed),      g_built_by_heuristics.load(std::memory_order_relaxed),
          g_deserialized.load(std::memory_order_relaxed), g_prefetched.load(std::memory_order_relaxed),
          g_deserialize_failed.load(std::memory_order_relaxed), g_build_us.load(std::memory_order_relaxed),
          g_deserialize_us.load(std::memory_order_relaxed)};
}

}  // namespace torch_cudnn_algo
