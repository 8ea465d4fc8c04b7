#include "decide/choice.h"

#include "base/legacy_algorithms.h"

namespace torch_cudnn_algo {

std::string Choice::python_literal(Direction direction) const {
  if (fastest) return "'fastest'";
  if (is_engine()) return "'" + engine->canonical + "'";
  if (is_kernel()) return "'" + kernel + "'";
  return std::to_string(legacy_algo) + "  # " + legacy_algo_name(direction, legacy_algo);
}

}  // namespace torch_cudnn_algo
