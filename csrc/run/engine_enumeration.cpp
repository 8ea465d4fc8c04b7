#include "run/engine_enumeration.h"

#include "base/cudnn_handle.h"
#include "run/engine_name.h"
#include "run/frontend_graph.h"

#include <algorithm>
#include <map>

namespace torch_cudnn_algo {
namespace {

// What cuDNN tells about one listed configuration before any plan is built.
EngineCandidate described_candidate(const ConvKey& key, ConvGraph& graph, const Listed& listed) {
  EngineCandidate candidate;
  candidate.name = listed.name;
  candidate.source = listed.source;
  candidate.numerical_notes = graph.numerical_notes_at(listed.index);
  candidate.behavior_notes = graph.behavior_notes_at(listed.index);
  candidate.refusal = precision_refusal(key, candidate.numerical_notes);
  candidate.engine = parse_engine_tag(listed.name);
  if (const auto& tag = candidate.engine) {
    candidate.builds_from_name = !tag->bare || graph.knob_count(tag->engine) == 0;
  }
  return candidate;
}

}  // namespace

std::vector<EngineCandidate> list_engine_candidates(const ConvKey& key) {
  auto graph = make_graph(key, current_cudnn_handle());
  std::vector<EngineCandidate> candidates;
  std::map<int64_t, std::string> knob_spaces;
  for (const auto& listed : enumerate(*graph)) {
    EngineCandidate candidate = described_candidate(key, *graph, listed);
    // cuDNN reports a configuration's workspace once its plan is built (no kernel runs).
    const auto built = graph->build_plan_at_index(listed.index);
    if (built.is_bad()) {
      if (candidate.refusal.empty()) {
        candidate.refusal = "cuDNN cannot build it here (" + message_of(built) + ")";
      }
    } else if (graph->get_workspace_size_plan_at_index(listed.index, candidate.workspace).is_bad()) {
      candidate.workspace = -1;
    }
    if (const auto& tag = candidate.engine) {
      if (!knob_spaces.count(tag->engine)) knob_spaces[tag->engine] = knob_space(*graph, tag->engine);
      candidate.knob_space = knob_spaces[tag->engine];
    }
    candidates.push_back(std::move(candidate));
  }
  return candidates;
}

std::vector<EngineCandidate> heuristic_engine_candidates(const ConvKey& key, bool with_mode_b) {
  auto graph = make_graph(key, current_cudnn_handle());
  std::vector<EngineCandidate> candidates;
  for (const auto& listed : enumerate(*graph, with_mode_b)) {
    candidates.push_back(described_candidate(key, *graph, listed));
  }
  return candidates;
}

std::vector<KnobRange> engine_knob_ranges(const ConvKey& key, int64_t engine) {
  auto graph = make_graph(key, current_cudnn_handle());
  std::vector<fe::Knob> knobs;
  std::vector<KnobRange> ranges;
  if (graph->get_knobs_for_engine(engine, knobs).is_bad()) return ranges;
  for (const auto& knob : knobs) {
    cudnnBackendKnobType_t backend_type;
    if (fe::convert_to_backend_knob_type(knob.type, backend_type) != CUDNN_STATUS_SUCCESS) continue;
    ranges.push_back({static_cast<int64_t>(backend_type), knob.minValue, knob.maxValue,
                      std::max<int64_t>(1, knob.stride)});
  }
  return ranges;
}

}  // namespace torch_cudnn_algo
