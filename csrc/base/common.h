// Shared vocabulary of the extension: directions, and the cuDNN status check
// that names the call that failed.
#pragma once

#include <ATen/cudnn/cudnn-wrapper.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace torch_cudnn_algo {

// The three cuDNN convolution directions. A transposed convolution maps onto
// them per cuDNN (its forward is a backward-data call), see README.
enum class Direction : int8_t { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

constexpr int kNumDirections = 3;

// "fwd", "bwd_data", "bwd_filter": the spelling the ops use.
const char* direction_name(Direction direction);

// The torch.backends.cudnn flag of a direction, e.g. "conv_fwd_algo".
const char* direction_flag_name(Direction direction);

// Parses "fwd" / "bwd_data" / "bwd_filter"; a ValueError names the valid ones.
Direction parse_direction(const std::string& name);

// Microseconds from `start` to now.
int64_t microseconds_since(std::chrono::steady_clock::time_point start);

// An integer setting from the environment, or `fallback` (a bad value warns once per name).
int64_t env_int(const char* name, int64_t fallback);

}  // namespace torch_cudnn_algo

// Checks a cuDNN status; the error names the status *and* the call, e.g.
// "cudnnConvolutionForward(...) returned CUDNN_STATUS_NOT_SUPPORTED".
#define TORCH_CUDNN_ALGO_CHECK(call)                                             \
  do {                                                                           \
    const cudnnStatus_t torch_cudnn_algo_status_ = (call);                       \
    TORCH_CHECK(torch_cudnn_algo_status_ == CUDNN_STATUS_SUCCESS,                \
                "torch_cudnn_algo: ", #call, " returned ",                       \
                cudnnGetErrorString(torch_cudnn_algo_status_));                  \
  } while (0)
