// cuDNN's legacy convolution algorithm enums, per direction: names, counts and
// the facts the selection rules need (determinism, "not implemented").
#pragma once

#include "base/common.h"

#include <string>
#include <vector>

namespace torch_cudnn_algo {

// Number of legacy algorithms cuDNN enumerates for a direction (fwd 8, bwd-data 6,
// bwd-filter 7).
int legacy_algo_count(Direction direction);

// Short name, e.g. forward 1 -> "IMPLICIT_PRECOMP_GEMM" (cuDNN's enum minus its prefix).
const char* legacy_algo_name(Direction direction, int algo);

// All names of a direction, indexed by enum value.
std::vector<std::string> legacy_algo_names(Direction direction);

// "1 (IMPLICIT_PRECOMP_GEMM)"
std::string describe_legacy_algo(Direction direction, int algo);

// cuDNN documents bwd-data 0 and bwd-filter 0 and 3 as non-deterministic
// (they accumulate with atomics); every forward algorithm is deterministic.
bool legacy_algo_is_deterministic(Direction direction, int algo);

// bwd-filter WINOGRAD (4) is in cuDNN's enum but has never been implemented.
bool legacy_algo_is_implemented(Direction direction, int algo);

}  // namespace torch_cudnn_algo
