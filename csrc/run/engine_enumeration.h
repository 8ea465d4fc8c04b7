// The engine configurations cuDNN offers for a convolution, and an engine's
// knobs: what the engine_configs query, the refusal messages' alternatives and
// the "fastest" tuner's candidates are made of. Nothing is executed.
#pragma once

#include "base/conv_key.h"
#include "run/engine_name.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

// One engine configuration cuDNN offers for a problem.
struct EngineCandidate {
  std::string name;             // "eng62_k2=1_k13=1_..."
  // `name` parsed (parse_engine_tag): nullopt if cuDNN ever spells one differently.
  std::optional<EngineName> engine;
  std::string source;           // "heuristics_a", "heuristics_b" or "fallback"
  int64_t workspace = -1;       // bytes; -1 when the execution plan could not be built
  std::vector<std::string> numerical_notes;  // TENSOR_CORE, DOWN_CONVERT_INPUTS, FFT, ...
  std::vector<std::string> behavior_notes;   // RUNTIME_COMPILATION, ...
  std::string knob_space;       // the engine's tunable knobs: "k2=0..3 k13=0..1"
  // Why the configuration would be refused here (precision/determinism rules), or "".
  std::string refusal;
  // Whether its name alone builds it, with no heuristics query: false for a
  // bare name of an engine with knobs (the fallback list's, for instance),
  // which names the knobs the heuristics rank first.
  bool builds_from_name = true;
};

// Every configuration cuDNN's heuristics (modes A, B) and fallback list offer
// for `key`'s problem, deduplicated, in that order. Each plan is built (to learn
// its workspace and whether cuDNN can build it); nothing is executed.
std::vector<EngineCandidate> list_engine_candidates(const ConvKey& key);

// What the "fastest" tuner starts from: heuristics mode A's configurations in
// its ranking order, then (with_mode_b) mode B's, then the fallback list,
// deduplicated; notes and the rules' refusal filled in, no plan built
// (workspace stays -1). Mode B only where asked: its query costs more than
// the plans it adds are worth on most convolutions.
std::vector<EngineCandidate> heuristic_engine_candidates(const ConvKey& key, bool with_mode_b = false);

// One tunable knob of an engine: values min, min + step, ..., max.
struct KnobRange {
  int64_t id;  // cuDNN backend knob type, as in configuration names ("k2")
  int64_t min;
  int64_t max;
  int64_t step;
};

// The knobs `engine` exposes for key's problem (empty if the engine does not apply).
std::vector<KnobRange> engine_knob_ranges(const ConvKey& key, int64_t engine);

}  // namespace torch_cudnn_algo
