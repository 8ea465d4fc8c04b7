// A process-wide, thread-safe map from a configuration key to its immutable
// runner. Runners are built outside the lock (cuDNN queries must not serialize
// unrelated threads); if two threads race, the first insert wins.
#pragma once

#include "run/runner.h"

#include <memory>
#include <mutex>
#include <unordered_map>

namespace torch_cudnn_algo {

// Instances are heap-allocated and never destroyed: runners own cuDNN objects,
// and destroying those from a static destructor can run after cuDNN unloaded.
template <typename Key, typename Hash>
class RunnerCache {
 public:
  // The runner for `key`, built by `build` on first use; `*created` is true for
  // exactly one caller per key (the one that should announce it).
  template <typename Build>
  std::shared_ptr<const Runner> get(const Key& key, bool* created, Build&& build) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = runners_.find(key);
      if (it != runners_.end()) {
        *created = false;
        return it->second;
      }
    }
    std::shared_ptr<const Runner> runner = build();
    std::lock_guard<std::mutex> lock(mutex_);
    const auto [it, inserted] = runners_.emplace(key, std::move(runner));
    *created = inserted;
    return it->second;
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    runners_.clear();
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return runners_.size();
  }

  // Calls visit(key, runner) for every runner, under the lock: `visit` must not
  // reach back into the cache.
  template <typename Visit>
  void for_each(Visit&& visit) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, runner] : runners_) visit(key, *runner);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<Key, std::shared_ptr<const Runner>, Hash> runners_;
};

}  // namespace torch_cudnn_algo
