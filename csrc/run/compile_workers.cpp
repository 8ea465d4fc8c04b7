#include "run/compile_workers.h"

#include "base/common.h"
#include "base/cudnn_handle.h"
#include "run/engine_name.h"
#include "run/graph_runner.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>

extern char** environ;

namespace torch_cudnn_algo {
namespace {

// The wire format: native byte order, both ends the same library build.
//   worker -> us, once ready:  u32 kReady
//   request:   u32 kRequest, u32 name length, ConvKey bytes, name bytes
//   answer:    u32 1 (a serialized execution plan) or 0 (cuDNN's or our error text), u64 length, bytes
constexpr uint32_t kReady = 0x52414354;    // "TCAR"
constexpr uint32_t kRequest = 0x51414354;  // "TCAQ"
static_assert(std::is_trivially_copyable_v<ConvKey>, "ConvKey is sent as bytes");

// A worker that has not answered in this long is taken for hung and killed
// (far beyond the slowest compile).
constexpr int kAnswerTimeoutMs = 120'000;
constexpr int kReadyTimeoutMs = 120'000;

// Writing to a worker that died raises SIGPIPE, which kills a process that
// has not ignored it (Python ignores it, a program embedding it may not): the
// signal is blocked on this thread while writing, and one it raised is taken.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
  }
  ~SigpipeBlocked() {
    const timespec none{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &none) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }

 private:
  sigset_t pipe_, previous_;
};

bool write_all(int fd, const void* data, size_t bytes) {
  const SigpipeBlocked blocked;
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n, bytes -= static_cast<size_t>(n);
  }
  return true;
}

// Reads exactly `bytes`; false on end of input, error or (timeout_ms >= 0) timeout.
bool read_all(int fd, void* data, size_t bytes, int timeout_ms = -1) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    if (timeout_ms >= 0) {
      pollfd ready{fd, POLLIN, 0};
      const int polled = ::poll(&ready, 1, timeout_ms);
      if (polled < 0 && errno == EINTR) continue;
      if (polled <= 0) return false;
    }
    const ssize_t n = ::read(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n, bytes -= static_cast<size_t>(n);
  }
  return true;
}

struct Worker {
  pid_t pid = -1;
  int to = -1;    // its requests
  int from = -1;  // its answers
  int device = -1;
  enum class State { kStarting, kIdle, kBusy, kGone } state = State::kStarting;
  std::thread waiting_for_ready;
};

std::atomic<int64_t> g_started{0}, g_ready{0}, g_builds{0}, g_failed_builds{0};

class CompilePool {
 public:
  // tune() may run in several threads at once: the first enable decides the
  // workers, the last disable stops them.
  void enable(std::vector<std::string> command, int64_t count) {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK_VALUE(!command.empty(), "torch_cudnn_algo: a compile worker needs a command");
    if (users_++ > 0) return;
    command_ = std::move(command);
    max_workers_ = std::max<int64_t>(0, count);
    // TORCH_CUDNN_ALGO_COMPILE_HERE=0 (tests, measurements): every such build
    // goes to a worker while one is alive.
    compile_here_ = env_int("TORCH_CUDNN_ALGO_COMPILE_HERE", 1) != 0;
    enabled_ = true;
  }

  void disable() {
    std::vector<std::unique_ptr<Worker>> workers;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (users_ == 0 || --users_ > 0) return;
      enabled_ = false;
      changed_.notify_all();  // callers waiting for a turn build here
      changed_.wait(lock, [&] { return busy_ == 0; });
      workers.swap(workers_);
    }
    std::vector<pid_t> pids;
    for (auto& worker : workers) {
      if (worker->to >= 0) ::close(worker->to);  // end of input: the worker exits
      if (worker->state == Worker::State::kStarting) ::kill(worker->pid, SIGKILL);
      if (worker->waiting_for_ready.joinable()) worker->waiting_for_ready.join();
      if (worker->from >= 0) ::close(worker->from);
      pids.push_back(worker->pid);
    }
    // A worker's exit (its CUDA context torn down) is slow: tune() returns
    // without waiting for it.
    if (!pids.empty()) std::thread(reap, std::move(pids)).detach();
  }

  CompileElsewhere acquire_and_build(const ConvKey& key, const std::string& engine) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!enabled_) return {};
    if (workers_.empty()) start_workers(key.device);
    Worker* worker = nullptr;
    changed_.wait(lock, [&] {
      worker = idle_worker(key.device);
      const bool may_compile_here = compile_here_ || !worker_alive(key.device);
      return !enabled_ || worker != nullptr || (may_compile_here && !local_busy_);
    });
    if (!enabled_) return {};
    if (worker == nullptr) {  // this process's turn
      local_busy_ = true;
      return {std::nullopt, std::shared_ptr<void>(nullptr, [this](void*) { release_local(); })};
    }
    worker->state = Worker::State::kBusy;
    ++busy_;
    lock.unlock();
    std::string answer;
    const bool ok = ask(*worker, key, engine, &answer);
    lock.lock();
    --busy_;
    if (worker->state == Worker::State::kBusy) worker->state = Worker::State::kIdle;
    changed_.notify_all();
    (ok ? g_builds : g_failed_builds).fetch_add(1, std::memory_order_relaxed);
    if (!ok) return {};  // built here, beside the others (a failure is rare)
    return {std::vector<uint8_t>(answer.begin(), answer.end()), nullptr};
  }

 private:
  void release_local() {
    std::lock_guard<std::mutex> lock(mutex_);
    local_busy_ = false;
    changed_.notify_all();
  }

  Worker* idle_worker(int device) {
    for (auto& worker : workers_) {
      if (worker->state == Worker::State::kIdle && worker->device == device) return worker.get();
    }
    return nullptr;
  }

  bool worker_alive(int device) const {
    return std::any_of(workers_.begin(), workers_.end(), [&](const auto& worker) {
      return worker->device == device && worker->state != Worker::State::kGone;
    });
  }

  // Starts the workers for `device`, each announcing itself when ready. Under mutex_.
  void start_workers(int device) {
    for (int64_t i = 0; i < max_workers_; ++i) {
      auto worker = spawn(device);
      if (!worker) return;  // spawning fails the same way for the next one
      Worker* raw = worker.get();
      raw->waiting_for_ready = std::thread([this, raw] {
        uint32_t hello = 0;
        const bool ready = read_all(raw->from, &hello, sizeof(hello), kReadyTimeoutMs) && hello == kReady;
        std::lock_guard<std::mutex> lock(mutex_);
        if (raw->state == Worker::State::kStarting) {
          raw->state = ready ? Worker::State::kIdle : Worker::State::kGone;
        }
        if (ready) g_ready.fetch_add(1, std::memory_order_relaxed);
        changed_.notify_all();
      });
      workers_.push_back(std::move(worker));
    }
  }

  std::unique_ptr<Worker> spawn(int device) {
    int requests[2], answers[2];
    if (::pipe2(requests, O_CLOEXEC) != 0) return nullptr;
    if (::pipe2(answers, O_CLOEXEC) != 0) {
      ::close(requests[0]), ::close(requests[1]);
      return nullptr;
    }
    std::vector<std::string> args = command_;
    args.push_back(std::to_string(device));
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, requests[0], 3);
    posix_spawn_file_actions_adddup2(&actions, answers[1], 4);
    posix_spawn_file_actions_adddup2(&actions, 2, 1);  // nothing of a worker's lands in our stdout
    pid_t pid = -1;
    const int failed = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(requests[0]), ::close(answers[1]);
    if (failed != 0) {
      ::close(requests[1]), ::close(answers[0]);
      return nullptr;
    }
    g_started.fetch_add(1, std::memory_order_relaxed);
    auto worker = std::make_unique<Worker>();
    worker->pid = pid, worker->to = requests[1], worker->from = answers[0], worker->device = device;
    return worker;
  }

  // One build on `worker` (this thread owns it while busy); false when it failed
  // (its error text in *answer) or the worker is gone (then marked so, and killed).
  bool ask(Worker& worker, const ConvKey& key, const std::string& engine, std::string* answer) {
    const uint32_t header[2] = {kRequest, static_cast<uint32_t>(engine.size())};
    uint32_t ok = 0;
    uint64_t length = 0;
    const bool talked = write_all(worker.to, header, sizeof(header)) && write_all(worker.to, &key, sizeof(key)) &&
                        write_all(worker.to, engine.data(), engine.size()) &&
                        read_all(worker.from, &ok, sizeof(ok), kAnswerTimeoutMs) &&
                        read_all(worker.from, &length, sizeof(length), kAnswerTimeoutMs) && length < (1ull << 34);
    if (talked) {
      answer->resize(length);
      if (read_all(worker.from, answer->data(), length, kAnswerTimeoutMs)) return ok == 1;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    worker.state = Worker::State::kGone;
    ::kill(worker.pid, SIGKILL);
    return false;
  }

  // Waits for stopped workers to exit; one still running after 10 s is killed.
  static void reap(std::vector<pid_t> pids) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (const pid_t pid : pids) {
      while (::waitpid(pid, nullptr, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, nullptr, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> command_;
  int64_t max_workers_ = 0;
  bool enabled_ = false;
  int64_t users_ = 0;  // enables not yet disabled
  bool compile_here_ = true;
  bool local_busy_ = false;
  int64_t busy_ = 0;  // workers in ask()
  std::vector<std::unique_ptr<Worker>> workers_;
};

CompilePool& pool() {
  static auto* pool = new CompilePool();  // leaked, like the runner caches
  return *pool;
}

}  // namespace

void enable_compile_workers(std::vector<std::string> command, int64_t count) {
  pool().enable(std::move(command), count);
}

void disable_compile_workers() {
  pool().disable();
}

CompileElsewhere compile_elsewhere(const ConvKey& key, const std::string& engine) {
  return pool().acquire_and_build(key, engine);
}

CompileWorkerCounts compile_worker_counts() {
  return {g_started.load(std::memory_order_relaxed), g_ready.load(std::memory_order_relaxed),
          g_builds.load(std::memory_order_relaxed), g_failed_builds.load(std::memory_order_relaxed)};
}

}  // namespace torch_cudnn_algo

extern "C" int torch_cudnn_algo_compile_worker(int in_fd, int out_fd, int device) {
  using namespace torch_cudnn_algo;
  try {
    const c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(device));
    (void)current_cudnn_handle();  // the CUDA context and cuDNN, before saying ready
    if (!write_all(out_fd, &kReady, sizeof(kReady))) return 1;
    for (;;) {
      uint32_t header[2];
      ConvKey key;
      if (!read_all(in_fd, header, sizeof(header))) return 0;  // end of input: tune() is done
      if (header[0] != kRequest || !read_all(in_fd, &key, sizeof(key))) return 1;
      std::string engine(header[1], '\0');
      if (!read_all(in_fd, engine.data(), engine.size())) return 1;
      SerializedBytes built;
      try {
        const c10::cuda::CUDAGuard key_device(static_cast<c10::DeviceIndex>(key.device));
        built = build_serialized_execution_plan(key, parse_engine_name(engine));  // the name crossed as text
      } catch (const std::exception& error) {
        built.why_not = error.what();
      }
      const uint32_t ok = built.why_not.empty() ? 1 : 0;
      const std::string& text = built.why_not;
      const uint64_t length = ok ? built.data.size() : text.size();
      const void* bytes = ok ? static_cast<const void*>(built.data.data()) : text.data();
      if (!write_all(out_fd, &ok, sizeof(ok)) || !write_all(out_fd, &length, sizeof(length)) ||
          !write_all(out_fd, bytes, length)) {
        return 1;
      }
    }
  } catch (const c10::Error& error) {
    std::fprintf(stderr, "torch_cudnn_algo compile worker: %s\n", error.what_without_backtrace());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "torch_cudnn_algo compile worker: %s\n", error.what());
    return 1;
  }
}
