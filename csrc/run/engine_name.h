// Engine configuration names: "eng62" or "eng62_k2=1_k13=1", as users pin them
// and as cuDNN tags its configurations.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch_cudnn_algo {

// "eng62" (bare: the engine with the knobs cuDNN's heuristics rank first) or
// "eng62_k2=1_k13=1" (exact: that configuration). Knob ids are cuDNN backend
// knob types, as in cuDNN's own configuration tags.
struct EngineName {
  int64_t engine = -1;
  std::vector<std::pair<int64_t, int64_t>> knobs;  // sorted by knob id
  bool bare = true;
  std::string canonical;  // lower-case, knobs sorted
};

// Parses an engine configuration name; ValueError naming the syntax otherwise.
EngineName parse_engine_name(const std::string& name);

// The configuration of `engine` with `knobs` set (distinct knob ids), spelled
// canonically: what parse_engine_name gives for its name.
EngineName engine_configuration(int64_t engine, std::vector<std::pair<int64_t, int64_t>> knobs);

// A configuration tag parsed like a user's engine name; nullopt if cuDNN ever
// spells one differently (it is then simply never matched).
std::optional<EngineName> parse_engine_tag(const std::string& tag);

// Whether cuDNN's configuration tag `tag` is what `wanted` asks for: the same
// engine and, unless `wanted` is bare, the same knobs.
bool engine_name_matches(const EngineName& wanted, const std::string& tag);

// Whether `wanted` names the configuration `built`: its engine and every knob
// it sets (a bare name sets none). cuDNN may report knobs the name left out.
bool names_configuration(const EngineName& wanted, const EngineName& built);

}  // namespace torch_cudnn_algo
