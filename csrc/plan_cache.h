// A process-wide, thread-safe map from a configuration key to its immutable
// plan. Plans are built outside the lock (cuDNN queries must not serialize
// unrelated threads); if two threads race, the first insert wins.
#pragma once

#include "plan.h"

#include <memory>
#include <mutex>
#include <unordered_map>

namespace torch_cudnn_algo {

// Instances are heap-allocated and never destroyed: plans own cuDNN objects,
// and destroying those from a static destructor can run after cuDNN unloaded.
template <typename Key, typename Hash>
class PlanCache {
 public:
  // The plan for `key`, built by `build` on first use; `*created` is true for
  // exactly one caller per key (the one that should announce it).
  template <typename Build>
  std::shared_ptr<const Plan> get(const Key& key, bool* created, Build&& build) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = plans_.find(key);
      if (it != plans_.end()) {
        *created = false;
        return it->second;
      }
    }
    std::shared_ptr<const Plan> plan = build();
    std::lock_guard<std::mutex> lock(mutex_);
    const auto [it, inserted] = plans_.emplace(key, std::move(plan));
    *created = inserted;
    return it->second;
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    plans_.clear();
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return plans_.size();
  }

  // Calls visit(key, plan) for every plan, under the lock: `visit` must not
  // reach back into the cache.
  template <typename Visit>
  void for_each(Visit&& visit) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, plan] : plans_) visit(key, *plan);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<Key, std::shared_ptr<const Plan>, Hash> plans_;
};

}  // namespace torch_cudnn_algo
