#include "run/engine_name.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <regex>

namespace torch_cudnn_algo {

EngineName parse_engine_name(const std::string& name) {
  std::string lowered = name;
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static const std::regex whole(R"(eng(\d{1,9})((_k\d{1,9}=-?\d{1,18})*))");
  std::smatch match;
  TORCH_CHECK_VALUE(std::regex_match(lowered, match, whole), "torch_cudnn_algo: '", name,
                    "' is not an engine configuration name; expected 'engN' or "
                    "'engN_kA=V_kB=W...' (for example 'eng62' or 'eng62_k2=1_k13=1')");
  const int64_t engine = std::stoll(match[1].str());
  const std::string text = match[2].str();
  static const std::regex knob(R"(_k(\d+)=(-?\d+))");
  std::vector<std::pair<int64_t, int64_t>> knobs;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), knob); it != std::sregex_iterator(); ++it) {
    knobs.emplace_back(std::stoll((*it)[1].str()), std::stoll((*it)[2].str()));
  }
  std::sort(knobs.begin(), knobs.end());
  for (size_t i = 1; i < knobs.size(); ++i) {
    TORCH_CHECK_VALUE(knobs[i].first != knobs[i - 1].first, "torch_cudnn_algo: '", name, "' sets knob k",
                      knobs[i].first, " twice");
  }
  return engine_configuration(engine, std::move(knobs));
}

EngineName engine_configuration(int64_t engine, std::vector<std::pair<int64_t, int64_t>> knobs) {
  EngineName configuration;
  configuration.engine = engine;
  configuration.knobs = std::move(knobs);
  std::sort(configuration.knobs.begin(), configuration.knobs.end());
  configuration.bare = configuration.knobs.empty();
  configuration.canonical = "eng" + std::to_string(engine);
  for (const auto& [id, value] : configuration.knobs) {
    configuration.canonical += "_k" + std::to_string(id) + "=" + std::to_string(value);
  }
  return configuration;
}

std::optional<EngineName> parse_engine_tag(const std::string& tag) {
  try {
    return parse_engine_name(tag);
  } catch (const c10::Error&) {
    return std::nullopt;
  }
}

bool engine_name_matches(const EngineName& wanted, const std::string& tag) {
  const auto candidate = parse_engine_tag(tag);
  return candidate && wanted.engine == candidate->engine &&
         (wanted.bare || wanted.knobs == candidate->knobs);
}

bool names_configuration(const EngineName& wanted, const EngineName& built) {
  if (wanted.engine != built.engine) return false;
  return std::all_of(wanted.knobs.begin(), wanted.knobs.end(), [&](const auto& knob) {
    return std::find(built.knobs.begin(), built.knobs.end(), knob) != built.knobs.end();
  });
}

}  // namespace torch_cudnn_algo
