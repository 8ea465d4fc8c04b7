// The execution plan cache: runtime-compiled execution plans kept on disk
// between processes.
//
// Building a runtime-compiled engine's execution plan (depthwise convolutions)
// compiles its kernel with NVRTC, a fraction of a second each, in every process
// anew. The CUDA driver's JIT cache spares stock PyTorch part of that on a
// later run but spares the tuner nothing. So a runtime-compiled execution plan
// the tuner builds is also saved, serialized, in a directory; a later process
// tuning the same configuration loads it in milliseconds instead of
// compiling. A file is keyed by everything that makes the plan: the
// convolution's configuration, the engine configuration, the GPU model, and
// cuDNN's and the frontend's versions; one that is not exactly what it claims
// to be (truncated, foreign, corrupt) is ignored and rebuilt.
#pragma once

#include "base/conv_key.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

// The directory, read on every call: TORCH_CUDNN_ALGO_COMPILE_CACHE; unset,
// $XDG_CACHE_HOME/torch_cudnn_algo/compiled-plans, else
// ~/.cache/torch_cudnn_algo/compiled-plans; "" when off (the variable set to
// "0" or empty, or no home directory).
std::string execution_plan_cache_dir();

// The serialized execution plan saved for `engine` (canonical name) on key's
// configuration and key.device's GPU model, or nullopt.
std::optional<std::vector<uint8_t>> load_cached_execution_plan(const ConvKey& key, const std::string& engine);

// Saves `blob` for a later load_cached_execution_plan: written aside and renamed, so a
// concurrent process never reads half a file. Failures (a read-only or full
// disk) are counted and otherwise ignored: the cache only saves time.
void save_cached_execution_plan(const ConvKey& key, const std::string& engine, const std::vector<uint8_t>& blob);

// A file load_cached_execution_plan returned that cuDNN then could not load.
void count_cached_execution_plan_rejected();
// A saved execution plan put in use.
void count_cached_execution_plan_loaded();

// Monotonic counts since the process started, for tests and benchmarks.
struct ExecutionPlanCacheCounts {
  int64_t loaded = 0;      // execution plans put in use from the cache
  int64_t saved = 0;       // execution plans written
  int64_t rejected = 0;    // files found but not usable (not ours, corrupt, or cuDNN refused them)
  int64_t save_failed = 0; // writes that failed
};
ExecutionPlanCacheCounts execution_plan_cache_counts();

}  // namespace torch_cudnn_algo
