// A choice: what runs for one direction, a legacy algorithm, an engine
// configuration, or the "fastest" policy. Set by a flag or by a plan entry.
#pragma once

#include "base/common.h"
#include "run/engine_name.h"

#include <optional>
#include <string>

namespace torch_cudnn_algo {

constexpr int kNoChoice = -1;

// One direction's pinned choice. Immutable once published.
struct Choice {
  int legacy_algo = kNoChoice;  // legacy enum value, or kNoChoice
  // An engine configuration ("eng62", "eng62_k2=1_k13=1"), parsed where its name came in:
  // nothing below parses it again. Its canonical spelling is what is shown and stored.
  std::optional<EngineName> engine;
  std::string kernel;           // one of our own kernels ("tca.direct"), or ""
  bool fastest = false;         // the "fastest" policy: profile once per configuration
  // Where the choice comes from when it is not a flag ("the plan entry '...'"),
  // for messages; empty for a flag.
  std::string origin;

  bool is_engine() const { return engine.has_value(); }
  bool is_kernel() const { return !kernel.empty(); }
  // As the flag would be assigned in Python: "1  # IMPLICIT_PRECOMP_GEMM" or "'eng62'".
  std::string python_literal(Direction direction) const;
};

}  // namespace torch_cudnn_algo
