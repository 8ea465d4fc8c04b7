// The execution plan cache: runtime-compiled execution plans kept on disk
// between processes.
//
// Building a runtime-compiled engine's execution plan (depthwise convolutions)
// compiles its kernel with NVRTC, a fraction of a second each, in every process
// anew. The CUDA driver's JIT cache spares stock PyTorch part of that on a
// later run but spares the tuner nothing. So a runtime-compiled execution plan
// the tuner builds is also saved, serialized, in the tuning database
// (tuning_db.h, entries of kind execution_plan); a later process tuning the
// same configuration loads it in milliseconds instead of compiling. An entry
// is keyed by everything that makes the plan: the convolution's
// configuration, the engine configuration, the GPU model, and cuDNN's and the
// frontend's versions; one that is not whole (truncated, corrupt) is ignored
// and rebuilt.
#pragma once

#include "base/conv_key.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

// The tuning database's directory (tuning_db_dir), "" when off.
std::string execution_plan_cache_dir();

// The serialized execution plan saved for `engine` (canonical name) on key's
// configuration and key.device's GPU model, or nullopt.
std::optional<std::vector<uint8_t>> load_cached_execution_plan(const ConvKey& key, const std::string& engine);

// Saves `blob` for a later load_cached_execution_plan (see db_save: a
// concurrent process never reads half an entry; a failure warns once and is
// otherwise ignored).
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
