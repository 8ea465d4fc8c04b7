#include "decide/config_recording.h"

#include "decide/choice.h"

#include <atomic>
#include <mutex>
#include <unordered_set>

namespace torch_cudnn_algo {
namespace {

std::atomic<bool> g_recording{false};
std::mutex g_record_mutex;
std::unordered_set<ConvKey, ConvKeyHash> g_recorded_keys;
std::vector<std::string> g_recorded;

}  // namespace

void set_config_recording(bool enabled) {
  if (enabled) {
    std::lock_guard<std::mutex> lock(g_record_mutex);
    g_recorded_keys.clear();
    g_recorded.clear();
  }
  g_recording.store(enabled);
}

bool config_recording() {
  return g_recording.load(std::memory_order_relaxed);
}

void record_config(const ConvKey& key) {
  ConvKey recorded = key;
  recorded.algo = kNoChoice;
  std::lock_guard<std::mutex> lock(g_record_mutex);
  if (g_recorded_keys.insert(recorded).second) g_recorded.push_back(json_request(recorded));
}

std::vector<std::string> recorded_configs() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  return g_recorded;
}

}  // namespace torch_cudnn_algo
