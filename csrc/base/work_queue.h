// Jobs keyed by what they compute, run by a few background threads, each
// result handed to the one caller that takes it: what tune() uses to prepare
// every configuration's candidates ahead (decide/tuner/candidates.cpp) and what a plan
// in use uses to load its execution plans ahead (run/execution_plan_loading.cpp).
//
// Header-only and free of torch and CUDA, so that tests/cpp/work_queue_test.cpp
// checks it on a machine without a GPU.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace torch_cudnn_algo {

template <typename Key, typename Result, typename Hash = std::hash<Key>>
class WorkQueue {
 public:
  // Computes one key's result on a worker thread; nullopt when it failed (the
  // caller that takes it then does the work itself). Must not throw.
  using Run = std::function<std::optional<Result>(const Key&)>;

  // What take() does with a job no worker has started yet.
  enum class IfQueued {
    kWait,      // wait for a worker to run it
    kTakeBack,  // drop it: the caller runs it itself, now
  };

  WorkQueue(Run run, size_t max_threads)
      : run_(std::move(run)), max_threads_(max_threads), owner_pid_(getpid()) {}
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;
  // The extension's queues are never destroyed (their workers may touch cuDNN
  // objects that static destructors free); a queue that is waits for its workers.
  ~WorkQueue() { cancel(); }

  // Queues `key` unless it is queued, running or done and not taken yet, and
  // starts a worker while fewer than max_threads run. Ignored after stop().
  void add(const Key& key) {
    if (max_threads_ == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_ || !jobs_.emplace(key, std::make_shared<Job>()).second) return;
    queue_.push_back(key);
    if (active_ == 0) {  // every worker has returned: reap them
      for (std::thread& worker : workers_) worker.join();
      workers_.clear();
    }
    if (active_ >= max_threads_) return;
    try {
      workers_.emplace_back([this] { work(); });
      ++active_;
    } catch (const std::system_error&) {
      if (active_ == 0) {  // no worker would ever run it: the caller will, at take()
        queue_.pop_back();
        jobs_.erase(key);
      }
    }
  }

  // key's result, waiting while a worker runs it (and, with kWait, while it is
  // queued); nullopt when `key` was never added, was taken back, or failed.
  // Handed out once.
  std::optional<Result> take(const Key& key, IfQueued if_queued) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto it = jobs_.find(key);
    if (it == jobs_.end()) return std::nullopt;
    const std::shared_ptr<Job> job = it->second;
    if (job->state == State::kQueued && if_queued == IfQueued::kTakeBack) {
      jobs_.erase(it);  // the worker that pops it finds it gone
      return std::nullopt;
    }
    done_.wait(lock, [&] { return job->state == State::kDone; });
    const auto now = jobs_.find(key);
    if (now == jobs_.end() || now->second != job) return std::nullopt;  // cancelled meanwhile
    jobs_.erase(now);
    return std::move(job->result);
  }

  // Returns once nothing is queued or running, the workers joined.
  void wait_idle() {
    std::vector<std::thread> finished;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      idle_.wait(lock, [&] { return queue_.empty() && active_ == 0; });
      finished.swap(workers_);
    }
    for (std::thread& worker : finished) worker.join();
  }

  // Drops what is queued, waits for what runs, and drops every result not taken.
  void cancel() {
    drop_queue();
    wait_idle();
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      it = it->second->state == State::kDone ? jobs_.erase(it) : std::next(it);  // added since: kept
    }
  }

  // cancel(), and nothing is added after: for the process's exit, so that no
  // worker is still inside a library being torn down. A no-op in a forked
  // child: the workers are the parent's (joining them would wait forever), and
  // the lock may have been held at the fork.
  void stop() {
    if (getpid() != owner_pid_) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopped_ = true;
    }
    cancel();
  }

 private:
  enum class State { kQueued, kRunning, kDone };
  struct Job {
    State state = State::kQueued;
    std::optional<Result> result;
  };

  // A dropped job counts as done without a result: a take() waiting for it returns nullopt.
  void drop_queue() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Key& key : queue_) {
      const auto it = jobs_.find(key);
      if (it == jobs_.end() || it->second->state != State::kQueued) continue;  // taken back, or running
      it->second->state = State::kDone;
      jobs_.erase(it);
    }
    queue_.clear();
    done_.notify_all();
  }

  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!queue_.empty()) {
      const Key key = queue_.front();
      queue_.pop_front();
      const auto it = jobs_.find(key);
      if (it == jobs_.end() || it->second->state != State::kQueued) continue;  // taken back
      const std::shared_ptr<Job> job = it->second;
      job->state = State::kRunning;
      lock.unlock();
      std::optional<Result> result = run_(key);
      lock.lock();
      job->result = std::move(result);
      job->state = State::kDone;
      done_.notify_all();
    }
    --active_;
    idle_.notify_all();
  }

  const Run run_;
  const size_t max_threads_;
  const pid_t owner_pid_;  // the process whose threads workers_ holds
  std::mutex mutex_;
  std::condition_variable done_;  // a job finished
  std::condition_variable idle_;  // a worker returned
  std::unordered_map<Key, std::shared_ptr<Job>, Hash> jobs_;
  std::deque<Key> queue_;
  std::vector<std::thread> workers_;  // joined by wait_idle(), or by add() once all returned
  size_t active_ = 0;
  bool stopped_ = false;
};

}  // namespace torch_cudnn_algo
