// Per-configuration profiling for conv_profile and the "fastest" policy: the
// first time a configuration is met, the Python profiler times every candidate
// (and logs the table); its pick is remembered for every later call.
#pragma once

#include "base/conv_key.h"
#include "decide/flag_state.h"

#include <memory>

namespace torch_cudnn_algo {

// The fastest eligible candidate for key's problem (key.algo is ignored),
// profiling the configuration first if it is new. nullptr means the stock path:
// no candidate qualified, profiling failed, or the configuration is new but
// cannot be profiled now (CUDA graph capture, or another thread is profiling it).
// `*settled` says whether the answer is final for this configuration (false in
// those last two cases: a later call decides).
std::shared_ptr<const Choice> profiled_choice(ConvKey key, bool* settled);

// Forgets every decision: the next call per configuration profiles again.
void clear_profile_decisions();
size_t profile_decision_count();

}  // namespace torch_cudnn_algo
