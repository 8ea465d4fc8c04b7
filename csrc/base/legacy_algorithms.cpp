#include "base/legacy_algorithms.h"

#include <array>

namespace torch_cudnn_algo {
namespace {

// Indexed by cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t; the static_asserts
// pin the tables to the cuDNN headers we build against.
constexpr std::array<const char*, 8> kForwardNames = {
    "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
    "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
constexpr std::array<const char*, 6> kBackwardDataNames = {
    "ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
constexpr std::array<const char*, 7> kBackwardFilterNames = {
    "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};

static_assert(kForwardNames.size() == CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
static_assert(kBackwardDataNames.size() == CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
static_assert(kBackwardFilterNames.size() == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
static_assert(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM == 1);
static_assert(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD == 4);
static_assert(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING == 6);

void check_algo(Direction direction, int algo) {
  TORCH_CHECK_VALUE(algo >= 0 && algo < legacy_algo_count(direction), "torch_cudnn_algo: ",
                    direction_name(direction), " legacy algorithm must be in [0, ",
                    legacy_algo_count(direction), "), got ", algo);
}

}  // namespace

int legacy_algo_count(Direction direction) {
  switch (direction) {
    case Direction::kForward:
      return static_cast<int>(kForwardNames.size());
    case Direction::kBackwardData:
      return static_cast<int>(kBackwardDataNames.size());
    case Direction::kBackwardFilter:
      return static_cast<int>(kBackwardFilterNames.size());
  }
  TORCH_INTERNAL_ASSERT(false, "unknown direction");
}

const char* legacy_algo_name(Direction direction, int algo) {
  check_algo(direction, algo);
  switch (direction) {
    case Direction::kForward:
      return kForwardNames[algo];
    case Direction::kBackwardData:
      return kBackwardDataNames[algo];
    case Direction::kBackwardFilter:
      return kBackwardFilterNames[algo];
  }
  TORCH_INTERNAL_ASSERT(false, "unknown direction");
}

std::vector<std::string> legacy_algo_names(Direction direction) {
  std::vector<std::string> names;
  for (int algo = 0; algo < legacy_algo_count(direction); ++algo) {
    names.emplace_back(legacy_algo_name(direction, algo));
  }
  return names;
}

std::string describe_legacy_algo(Direction direction, int algo) {
  return std::to_string(algo) + " (" + legacy_algo_name(direction, algo) + ")";
}

bool legacy_algo_is_deterministic(Direction direction, int algo) {
  check_algo(direction, algo);
  switch (direction) {
    case Direction::kForward:
      return true;
    case Direction::kBackwardData:
      return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
    case Direction::kBackwardFilter:
      return algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 &&
             algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown direction");
}

bool legacy_algo_is_implemented(Direction direction, int algo) {
  check_algo(direction, algo);
  return !(direction == Direction::kBackwardFilter &&
           algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD);
}

}  // namespace torch_cudnn_algo
