#include "base/common.h"

#include <c10/util/env.h>

#include <mutex>
#include <set>

namespace torch_cudnn_algo {

const char* direction_name(Direction direction) {
  switch (direction) {
    case Direction::kForward:
      return "fwd";
    case Direction::kBackwardData:
      return "bwd_data";
    case Direction::kBackwardFilter:
      return "bwd_filter";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown direction ", static_cast<int>(direction));
}

const char* direction_flag_name(Direction direction) {
  switch (direction) {
    case Direction::kForward:
      return "conv_fwd_algo";
    case Direction::kBackwardData:
      return "conv_bwd_data_algo";
    case Direction::kBackwardFilter:
      return "conv_bwd_filter_algo";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown direction ", static_cast<int>(direction));
}

Direction parse_direction(const std::string& name) {
  for (int i = 0; i < kNumDirections; ++i) {
    const auto direction = static_cast<Direction>(i);
    if (name == direction_name(direction)) {
      return direction;
    }
  }
  TORCH_CHECK_VALUE(false, "torch_cudnn_algo: unknown direction '", name,
                    "'; valid directions are 'fwd', 'bwd_data', 'bwd_filter'");
}

int64_t env_int(const char* name, int64_t fallback) {
  if (const auto text = c10::utils::get_env(name)) {
    try {
      return std::stoll(*text);
    } catch (const std::exception&) {
      static std::mutex mutex;
      static std::set<std::string> warned;  // once per setting: some are read on every tuning
      std::lock_guard<std::mutex> lock(mutex);
      if (warned.insert(name).second) {
        TORCH_WARN("torch_cudnn_algo: ignoring ", name, "=", *text, " (expected an integer)");
      }
    }
  }
  return fallback;
}

int64_t microseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace torch_cudnn_algo
