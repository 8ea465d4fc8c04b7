#include "store/execution_plan_cache.h"

#include "store/serialized_execution_plan.h"
#include "store/tuning_db.h"

#include <cudnn.h>
#include <cudnn_frontend/thirdparty/nlohmann/json.hpp>
#include <cudnn_frontend_version.h>

#include <atomic>
#include <sstream>

namespace torch_cudnn_algo {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written

std::atomic<int64_t> g_loaded{0}, g_saved{0}, g_rejected{0}, g_save_failed{0};

// Everything that makes the plan, as text: the tuning database's key.
std::string key_text(const ConvKey& key, const std::string& engine) {
  ConvKey problem = key;
  problem.device = 0;  // any device of the same model runs the same plan
  std::ostringstream text;
  text << "torch_cudnn_algo compiled plan 1; cuDNN " << cudnnGetVersion() << "; frontend "
       << CUDNN_FRONTEND_VERSION << "; GPU " << gpu_model_name(key.device) << "; engine " << engine << "; key ";
  const auto* bytes = reinterpret_cast<const unsigned char*>(&problem);
  static const char* hex = "0123456789abcdef";
  for (size_t i = 0; i < sizeof(problem); ++i) text << hex[bytes[i] >> 4] << hex[bytes[i] & 15];
  return text.str();
}

// What a listing of the database shows of the entry.
std::string header_of(const ConvKey& key, const std::string& engine) {
  Json header;
  header["configuration"] = Json::parse(json_request(key));
  header["engine"] = engine;
  header["gpu"] = gpu_model_name(key.device);
  header["cudnn"] = static_cast<int64_t>(cudnnGetVersion());
  header["cudnn_frontend"] = static_cast<int64_t>(CUDNN_FRONTEND_VERSION);
  header["saved"] = utc_now_iso();
  header["host"] = host_name();
  return header.dump();
}

}  // namespace

std::string execution_plan_cache_dir() {
  return tuning_db_dir();
}

std::optional<std::vector<uint8_t>> load_cached_execution_plan(const ConvKey& key, const std::string& engine) {
  if (tuning_db_dir().empty()) return std::nullopt;
  const std::string text = key_text(key, engine);
  bool rejected = false;
  auto entry = db_load(DbKind::kExecutionPlan, text, &rejected);
  if (!entry) {
    if (rejected) g_rejected.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  if (entry->blob.empty()) {
    g_rejected.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  return std::move(entry->blob);
}

void save_cached_execution_plan(const ConvKey& key, const std::string& engine, const std::vector<uint8_t>& blob) {
  if (tuning_db_dir().empty() || blob.empty()) return;
  const bool saved = db_save(DbKind::kExecutionPlan, {key_text(key, engine), header_of(key, engine), blob});
  (saved ? g_saved : g_save_failed).fetch_add(1, std::memory_order_relaxed);
}

void count_cached_execution_plan_rejected() {
  g_rejected.fetch_add(1, std::memory_order_relaxed);
}

void count_cached_execution_plan_loaded() {
  g_loaded.fetch_add(1, std::memory_order_relaxed);
}

ExecutionPlanCacheCounts execution_plan_cache_counts() {
  return {g_loaded.load(std::memory_order_relaxed), g_saved.load(std::memory_order_relaxed),
          g_rejected.load(std::memory_order_relaxed), g_save_failed.load(std::memory_order_relaxed)};
}

}  // namespace torch_cudnn_algo
