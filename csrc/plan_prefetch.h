// Rebuilding a plan's execution plans ahead of their first calls. Rebuilding
// one from its blob costs milliseconds of host time (cuDNN reloads the engine
// and its kernels; 14 ms a plan on conv_tasnet's runtime-compiled engines,
// H100), and a first training step with a plan did all of them one after the
// other on the training thread. So the first call on a device that needs a
// blob hands every blob the plan in force carries for that device to worker
// threads, which load them while the step goes on; a call whose blob is still
// queued takes it back and loads it itself, one whose blob is being loaded
// waits for it. Only the settings-independent part is done ahead (the
// deserialisation): the caller still checks the result against its own
// configuration and settings, as for a blob it loaded itself.
//
// Header-only: the loaded type (a frontend graph) is private to graph_runner.cpp.
#pragma once

#include "plan_blobs.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace torch_cudnn_algo {

template <typename Loaded>
class BlobPrefetcher {
 public:
  // Loads one blob for a device, on a worker thread; must not throw.
  using Load = std::function<Loaded(const PlanBlob& blob, int device)>;

  BlobPrefetcher(Load load, size_t max_threads)
      : load_(std::move(load)), max_threads_(max_threads), owner_pid_(getpid()) {}

  // Starts loading, for `device`, the blobs `collect()` returns but `own`
  // (the caller's, which it loads at once: queued first, a worker would make
  // it wait), unless that was done already for this plan (`generation`); a new
  // generation first drops whatever the previous plan queued or loaded and
  // nobody took.
  template <typename Collect>
  void start(int device, uint64_t generation, Collect&& collect, const PlanBlob* own) {
    if (max_threads_ == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    if (generation != generation_) {
      forget_locked();
      generation_ = generation;
    }
    if (!started_devices_.insert(device).second) return;
    for (std::shared_ptr<const PlanBlob>& blob : collect()) {
      const JobKey key{blob.get(), device};
      if (blob.get() == own || jobs_.count(key) != 0) continue;
      jobs_.emplace(key, Job{std::move(blob), next_id_++, State::kQueued, std::nullopt});
      queue_.push_back(key);
    }
    if (!exit_hook_registered_) {
      // Workers still inside cuDNN when the process exits would race the
      // libraries' teardown: exit() waits for them (CUDA's own exit handler,
      // registered earlier, runs after this one).
      std::atexit([] { instance_for_exit()->stop(); });
      exit_hook_registered_ = true;
      instance_for_exit() = this;
    }
    if (active_ == 0) {  // the previous plan's workers are done: reap them
      for (std::thread& worker : workers_) worker.join();
      workers_.clear();
    }
    const size_t wanted = std::min(max_threads_, queue_.size());
    while (active_ < wanted) {
      try {
        workers_.emplace_back([this] { work(); });
      } catch (const std::system_error&) {  // no thread: the callers load what stays queued
        break;
      }
      ++active_;
    }
  }

  // What the workers loaded of `blob` for `device`, waiting if a worker is
  // loading it; nullopt when no worker will (never queued, or still queued:
  // then taken back), so that the caller loads it itself. Handed out once.
  std::optional<Loaded> take(const PlanBlob* blob, int device) {
    std::unique_lock<std::mutex> lock(mutex_);
    const JobKey key{blob, device};
    auto it = jobs_.find(key);
    if (it == jobs_.end()) return std::nullopt;
    if (it->second.state == State::kQueued) {  // the worker that pops it skips it
      jobs_.erase(it);
      return std::nullopt;
    }
    const uint64_t id = it->second.id;
    done_.wait(lock, [&] {
      it = jobs_.find(key);
      return it == jobs_.end() || it->second.id != id || it->second.state == State::kDone;
    });
    if (it == jobs_.end() || it->second.id != id) return std::nullopt;  // dropped meanwhile
    std::optional<Loaded> loaded = std::move(it->second.loaded);
    jobs_.erase(it);
    return loaded;
  }

  // Empties the queue and waits for the loads in flight; nothing starts after.
  // A no-op in a forked child: the workers are the parent's (joining them
  // would wait forever), and the lock may have been held at the fork.
  void stop() {
    if (getpid() != owner_pid_) return;
    std::vector<std::thread> workers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      forget_locked();
      workers.swap(workers_);
    }
    for (std::thread& worker : workers) worker.join();
  }

 private:
  enum class State { kQueued, kLoading, kDone };
  using JobKey = std::pair<const PlanBlob*, int>;
  struct Job {
    std::shared_ptr<const PlanBlob> blob;  // keeps the key's address from being reused
    uint64_t id;
    State state;
    std::optional<Loaded> loaded;
  };

  static BlobPrefetcher*& instance_for_exit() {
    static BlobPrefetcher* instance = nullptr;
    return instance;
  }

  // Drops queued and loaded jobs; the ones being loaded are dropped by their
  // worker when it finds its job gone.
  void forget_locked() {
    queue_.clear();
    started_devices_.clear();
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      it = it->second.state == State::kLoading ? std::next(it) : jobs_.erase(it);
    }
    for (auto& [key, job] : jobs_) job.id = next_id_++;  // what the worker finds is not its job
    done_.notify_all();
  }

  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!queue_.empty()) {
      const JobKey key = queue_.front();
      queue_.pop_front();
      auto it = jobs_.find(key);
      if (it == jobs_.end() || it->second.state != State::kQueued) continue;  // taken back
      it->second.state = State::kLoading;
      const uint64_t id = it->second.id;
      const std::shared_ptr<const PlanBlob> blob = it->second.blob;
      lock.unlock();
      Loaded loaded = load_(*blob, key.second);
      lock.lock();
      it = jobs_.find(key);
      if (it != jobs_.end() && it->second.id == id) {
        it->second.loaded = std::move(loaded);
        it->second.state = State::kDone;
      } else if (it != jobs_.end() && it->second.state == State::kLoading) {
        jobs_.erase(it);  // dropped while loading (a new plan): nobody waits for it
      }
      done_.notify_all();
    }
    TORCH_INTERNAL_ASSERT(active_ > 0);
    --active_;
  }

  const Load load_;
  const size_t max_threads_;
  const pid_t owner_pid_;  // the process whose threads workers_ holds
  std::mutex mutex_;
  std::condition_variable done_;
  std::map<JobKey, Job> jobs_;
  std::deque<JobKey> queue_;
  std::set<int> started_devices_;
  std::vector<std::thread> workers_;  // joined by stop(); a finished one waits for it
  size_t active_ = 0;
  uint64_t generation_ = 0;
  uint64_t next_id_ = 0;
  bool stopping_ = false;
  bool exit_hook_registered_ = false;
};

}  // namespace torch_cudnn_algo
