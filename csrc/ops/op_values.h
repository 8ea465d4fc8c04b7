// How the operators hand results to Python (src/torch_cudnn_algo/_ops.py):
// structured results as JSON text, named counters as Dict(str, int).
#pragma once

#include <ATen/core/Dict.h>
#include <cudnn_frontend/thirdparty/nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

namespace torch_cudnn_algo {

using Json = nlohmann::ordered_json;  // keys in the order written

// A result as JSON text, the one encoding of structured results.
inline std::string dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Named counters as the Dict(str, int) the Python side reads.
inline c10::Dict<std::string, int64_t> counts_dict(std::initializer_list<std::pair<const char*, int64_t>> counts) {
  c10::Dict<std::string, int64_t> out;
  for (const auto& [name, value] : counts) out.insert(name, value);
  return out;
}

}  // namespace torch_cudnn_algo
