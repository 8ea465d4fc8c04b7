// What the user pinned: one legacy algorithm per direction (or none), and the
// strict flag. Reads are lock-free (they sit on every convolution call); writes
// also (de)register the dispatcher overrides so "nothing pinned" is stock
// PyTorch with no override present at all.
#pragma once

#include "common.h"

namespace torch_cudnn_algo {

constexpr int kNoChoice = -1;

// The pinned legacy algorithm of `direction`, or kNoChoice.
int pinned_legacy_algo(Direction direction);

// Pins `algo` (kNoChoice clears). Out-of-range or unimplemented values raise
// ValueError and change nothing.
void set_pinned_legacy_algo(Direction direction, int algo);

bool strict_mode();
void set_strict_mode(bool strict);

struct LegacyPlan;

// Applies the contract to a plan whose pinned algorithm cannot run: in strict
// mode raises a RuntimeError with the convolution's parameters and a Python
// repro; otherwise warns once per configuration and returns, and the caller
// runs the stock path.
void handle_refusal(const LegacyPlan& plan);

}  // namespace torch_cudnn_algo
