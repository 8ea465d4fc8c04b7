// What the user pinned: one legacy algorithm per direction (or none), and the
// strict flag. Reads are lock-free (they sit on every convolution call); writes
// also (de)register the dispatcher overrides so "nothing pinned" is stock
// PyTorch with no override present at all.
#pragma once

#include "common.h"

#include <memory>

namespace torch_cudnn_algo {

constexpr int kNoChoice = -1;

// The pinned legacy algorithm of `direction`, or kNoChoice.
int pinned_legacy_algo(Direction direction);

// Pins `algo` (kNoChoice clears). Out-of-range or unimplemented values raise
// ValueError and change nothing.
void set_pinned_legacy_algo(Direction direction, int algo);

bool strict_mode();
void set_strict_mode(bool strict);

struct ConvKey;
struct LegacyPlan;

// The plan running the pinned algorithm (`key.algo`) on `key`'s problem, or
// nullptr when that algorithm cannot run it. Applies the contract on the way:
// the first run of a configuration logs "requested <dir> algorithm N (NAME) is
// set"; a refusal raises (strict, with the parameters and a Python repro) or
// warns once per configuration, and the caller then runs the stock path.
std::shared_ptr<const LegacyPlan> runnable_pinned_plan(const ConvKey& key);

}  // namespace torch_cudnn_algo
