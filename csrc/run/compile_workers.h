// Runtime compilation in worker processes, for tune().
//
// Building a runtime-compiled engine's execution plan compiles its kernel with
// NVRTC, which holds a process-wide lock while it compiles: a process's
// compiles run one after another whatever the thread count, while two
// processes compiling at once each take as long as one alone. So while tune()
// runs, such builds are shared between this process (one at a time) and worker
// processes that build the execution plan and send back its serialized form,
// which this process loads in milliseconds.
//
// A worker is a Python interpreter (without `site`) that loads torch's
// libraries and this extension's library without importing torch, then runs
// torch_cudnn_algo_compile_worker: ready in a fraction of the time
// `import torch` takes. Workers are
// started on the first runtime-compiled build that wants one, so a network
// without such engines starts none; each holds a CUDA context on its device
// until tune() ends. A worker that fails to start, dies or errs costs nothing
// but its share: that build is done here.
#pragma once

#include "base/conv_key.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

// Allows up to `count` workers, each started as `command` plus the device
// index; `command` runs torch_cudnn_algo_compile_worker(3, 4, device). Calls
// nest (tune() in several threads): the first one's command and count hold.
void enable_compile_workers(std::vector<std::string> command, int64_t count);
// Ends one enable_compile_workers; the last waits for builds in flight, stops
// the workers and disables them. Without an enable, nothing.
void disable_compile_workers();

// One runtime-compiled build of `engine` for `key`: the execution plan a worker built,
// serialised, or none; then the caller builds it here, holding this process's
// compile turn while `local_turn` lives. Without enabled workers: none, and no
// turn (the caller builds as before).
struct CompileElsewhere {
  std::optional<std::vector<uint8_t>> execution_plan;
  std::shared_ptr<void> local_turn;
};
CompileElsewhere compile_elsewhere(const ConvKey& key, const std::string& engine);

// For tests and reports: workers started since the process started, those that
// became ready, and the builds they returned and failed.
struct CompileWorkerCounts {
  int64_t started = 0;
  int64_t ready = 0;
  int64_t builds = 0;
  int64_t failed_builds = 0;
};
CompileWorkerCounts compile_worker_counts();

}  // namespace torch_cudnn_algo

// The worker's main loop (called from the worker's Python through ctypes):
// reads requests on `in_fd`, answers on `out_fd`, until end of input.
extern "C" int torch_cudnn_algo_compile_worker(int in_fd, int out_fd, int device);
