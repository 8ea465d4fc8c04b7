#include "store/execution_plan_cache.h"

#include "store/serialized_execution_plan.h"

#include <cudnn.h>
#include <cudnn_frontend_version.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace torch_cudnn_algo {
namespace {

// The file: kMagic, u64 key length, the key text, u64 blob length, u64 FNV-1a
// of the blob, the blob. Native byte order: a file is only ever read back on
// a host of the same kind (its GPU model is in the key).
constexpr char kMagic[8] = {'T', 'C', 'A', 'C', 'P', 'C', '0', '1'};
constexpr uint64_t kMaxBlobBytes = uint64_t{1} << 30;

std::atomic<int64_t> g_loaded{0}, g_saved{0}, g_rejected{0}, g_save_failed{0};

uint64_t fnv1a(const void* data, size_t bytes, uint64_t hash = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

// Everything that makes the plan, as text: the file's name is its hash, and
// the file repeats it in full, so that a hash collision is caught.
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

std::filesystem::path file_for(const std::string& dir, const std::string& text) {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.plan",
                static_cast<unsigned long long>(fnv1a(text.data(), text.size())));
  return std::filesystem::path(dir) / name;
}

template <typename T>
bool take(const std::string& data, size_t* at, T* value) {
  if (data.size() - *at < sizeof(T)) return false;
  std::memcpy(value, data.data() + *at, sizeof(T));
  *at += sizeof(T);
  return true;
}

// The blob a file holds when it is a whole file saved for `text`, else nullopt.
std::optional<std::vector<uint8_t>> blob_of_file(const std::string& data, const std::string& text) {
  size_t at = sizeof(kMagic);
  if (data.size() < at || std::memcmp(data.data(), kMagic, at) != 0) return std::nullopt;
  uint64_t text_bytes = 0, blob_bytes = 0, blob_hash = 0;
  if (!take(data, &at, &text_bytes) || text_bytes != text.size() || data.compare(at, text_bytes, text) != 0) {
    return std::nullopt;  // not ours, or saved for another plan whose key text hashes the same
  }
  at += text_bytes;
  if (!take(data, &at, &blob_bytes) || !take(data, &at, &blob_hash) || data.size() - at != blob_bytes ||
      fnv1a(data.data() + at, blob_bytes) != blob_hash) {
    return std::nullopt;  // truncated or corrupt
  }
  return std::vector<uint8_t>(data.begin() + static_cast<std::ptrdiff_t>(at), data.end());
}

}  // namespace

std::string execution_plan_cache_dir() {
  if (const char* set = std::getenv("TORCH_CUDNN_ALGO_COMPILE_CACHE")) {
    const std::string dir = set;
    return dir == "0" ? std::string() : dir;
  }
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/torch_cudnn_algo/compiled-plans";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return std::string(home) + "/.cache/torch_cudnn_algo/compiled-plans";
  return {};
}

std::optional<std::vector<uint8_t>> load_cached_execution_plan(const ConvKey& key, const std::string& engine) {
  const std::string dir = execution_plan_cache_dir();
  if (dir.empty()) return std::nullopt;
  const std::string text = key_text(key, engine);
  std::ifstream file(file_for(dir, text), std::ios::binary);
  if (!file) return std::nullopt;  // not saved yet
  const std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto blob = blob_of_file(data, text);
  if (!blob) g_rejected.fetch_add(1, std::memory_order_relaxed);
  return blob;
}

void save_cached_execution_plan(const ConvKey& key, const std::string& engine, const std::vector<uint8_t>& blob) {
  const std::string dir = execution_plan_cache_dir();
  if (dir.empty() || blob.empty() || blob.size() > kMaxBlobBytes) return;
  static std::atomic<uint64_t> serial{0};
  const std::string text = key_text(key, engine);
  const auto path = file_for(dir, text);
  auto aside = path;
  aside += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  bool ok = !error;
  if (ok) {
    std::ofstream file(aside, std::ios::binary | std::ios::trunc);
    const uint64_t text_bytes = text.size(), blob_bytes = blob.size(), blob_hash = fnv1a(blob.data(), blob.size());
    file.write(kMagic, sizeof(kMagic));
    file.write(reinterpret_cast<const char*>(&text_bytes), sizeof(text_bytes));
    file.write(text.data(), static_cast<std::streamsize>(text.size()));
    file.write(reinterpret_cast<const char*>(&blob_bytes), sizeof(blob_bytes));
    file.write(reinterpret_cast<const char*>(&blob_hash), sizeof(blob_hash));
    file.write(reinterpret_cast<const char*>(blob.data()), static_cast<std::streamsize>(blob.size()));
    file.close();
    ok = static_cast<bool>(file);
    if (ok) {
      std::filesystem::rename(aside, path, error);  // atomic: a reader sees the old file or the new one
      ok = !error;
    }
  }
  if (!ok) std::filesystem::remove(aside, error);
  (ok ? g_saved : g_save_failed).fetch_add(1, std::memory_order_relaxed);
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
