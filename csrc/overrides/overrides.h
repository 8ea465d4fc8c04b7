// The runtime torch::Library objects that replace ATen's CUDA kernels. Each one
// exists only while a choice that needs it is pinned; destroying it restores
// ATen's kernel. Every change that can need or free one (a pinned choice,
// conv_profile, a plan put in force, recording) brings them in line here.
#pragma once

#include "base/common.h"
#include "decide/choice.h"

#include <memory>
#include <string>
#include <vector>

namespace torch {
class Library;
}

namespace torch_cudnn_algo {

// Register the kernels (CUDA key) on `lib`: aten::cudnn_convolution,
// aten::cudnn_convolution_transpose and aten::convolution_backward.
void register_forward_override(torch::Library& lib);
void register_transpose_override(torch::Library& lib);
void register_backward_override(torch::Library& lib);

// Brings the registered overrides in line with the pinned choices; returns the
// lines to log (one per override added or removed).
std::vector<std::string> sync_overrides();

std::vector<std::string> registered_override_names();

// Pins `choice` (nullptr: nothing) for `direction` and brings the overrides in
// line, serialized with every other writer so the registered overrides always
// match the last write; if registering fails, the previous choice is back and
// the error propagates. Forgets every thread's selections; logs the overrides
// added or removed.
void pin_choice(Direction direction, std::shared_ptr<const Choice> choice);

// Brings the overrides in line after a change that is not a choice (conv_profile).
void resync_overrides();

// (De)registers the overrides to match a change made outside the flags (a plan
// put in force, recording) and forgets every thread's selections.
void refresh_overrides();

}  // namespace torch_cudnn_algo
