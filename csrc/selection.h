// What the user pinned per direction (a legacy algorithm or a graph-API engine
// configuration, or nothing) and the strict flag. Reads sit on every
// convolution call and take no lock of ours; writes also (de)register the
// dispatcher overrides so "nothing pinned" is stock PyTorch with no override.
#pragma once

#include "common.h"

#include <memory>
#include <string>

namespace torch_cudnn_algo {

constexpr int kNoChoice = -1;

struct ConvKey;
struct Plan;

// One direction's pinned choice. Immutable once published.
struct Choice {
  int legacy_algo = kNoChoice;  // legacy enum value, or kNoChoice
  std::string engine;           // engine configuration name ("eng62", "eng62_k2=1_k13=1"), or ""

  bool is_engine() const { return !engine.empty(); }
  // As the flag would be assigned in Python: "1  # IMPLICIT_PRECOMP_GEMM" or "'eng62'".
  std::string python_literal(Direction direction) const;
};

// The pinned choice of `direction`, or nullptr.
std::shared_ptr<const Choice> pinned_choice(Direction direction);

// Pins a legacy algorithm (kNoChoice clears). Out-of-range or unimplemented
// values raise ValueError and change nothing.
void set_pinned_legacy_algo(Direction direction, int algo);

// Pins an engine configuration by name ("" clears); a malformed name raises
// ValueError and changes nothing.
void set_pinned_engine(Direction direction, const std::string& name);

bool strict_mode();
void set_strict_mode(bool strict);

// The plan running `choice` on `key`'s problem (key.algo is ignored), or nullptr
// when that choice cannot run it. Applies the contract on the way: the first run
// of a configuration logs "requested <dir> algorithm <choice> is set"; a refusal
// raises (strict, with the parameters and a Python repro) or warns once per
// configuration, and the caller then runs the stock path.
std::shared_ptr<const Plan> runnable_pinned_plan(const Choice& choice, ConvKey key);

}  // namespace torch_cudnn_algo
