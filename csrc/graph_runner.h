// Runs cuDNN graph-API engine configurations (what stock PyTorch runs) through
// the cuDNN frontend 1.x: conv_fprop, conv_dgrad and conv_wgrad graphs, one
// GraphRunner per (configuration, engine name), built once and shared.
#pragma once

#include "runner.h"

#include <memory>
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

// The runner running `engine` on `key`'s problem, built on first use (heuristics
// query, support check and execution plan build; nothing executed). `*created` as for
// get_legacy_runner. Must run with key.device current. A `runtime_compiled`
// configuration (cuDNN's RUNTIME_COMPILATION note) is loaded from the
// execution plan cache when an earlier process saved it, else may be built by a compile
// worker while tune() runs, and is then saved (see execution_plan_cache.h and
// compile_workers.h).
std::shared_ptr<const Runner> get_graph_runner(const ConvKey& key, const std::string& engine,
                                           bool* created, bool runtime_compiled = false);

void clear_graph_runners();
size_t graph_runner_count();

// A runner's execution plan serialized (the frontend's Graph::serialize), or why there is none.
struct SerializedBytes {
  std::vector<uint8_t> data;  // empty when why_not is set
  std::string why_not;        // a legacy algorithm, a refused runner, or cuDNN's refusal
};

// What a plan file stores of a built runner (see serialized_execution_plan.h): get_graph_runner
// rebuilds it from that on a GPU of the same model, cuDNN and frontend.
SerializedBytes serialize_execution_plan(const Runner& runner);

// `engine` built for `key` outside the runner cache and serialized: what a
// compile worker sends back.
SerializedBytes build_serialized_execution_plan(const ConvKey& key, const std::string& engine);

// One runner of the graph runner cache, for tests and reports.
struct GraphRunnerSummary {
  ConvKey key;
  std::string engine;  // the name it was asked for
  std::string choice;  // the configuration cuDNN runs
  std::string refusal;
  int64_t workspace;
  bool deserialized;  // loaded from a serialized execution plan (a plan file's, or a compile worker's)
};
std::vector<GraphRunnerSummary> graph_runner_summaries();

// One engine configuration cuDNN offers for a problem.
struct EngineCandidate {
  std::string name;             // "eng62_k2=1_k13=1_..."
  std::string source;           // "heuristics_a", "heuristics_b" or "fallback"
  int64_t workspace = -1;       // bytes; -1 when the execution plan could not be built
  std::vector<std::string> numerical_notes;  // TENSOR_CORE, DOWN_CONVERT_INPUTS, FFT, ...
  std::vector<std::string> behavior_notes;   // RUNTIME_COMPILATION, ...
  std::string knob_space;       // the engine's tunable knobs: "k2=0..3 k13=0..1"
  // Why the configuration would be refused here (precision/determinism rules), or "".
  std::string refusal;
};

// Every configuration cuDNN's heuristics (modes A, B) and fallback list offer
// for `key`'s problem, deduplicated, in that order. Each plan is built (to learn
// its workspace and whether cuDNN can build it); nothing is executed.
std::vector<EngineCandidate> list_engine_candidates(const ConvKey& key);

// What the "fastest" tuner starts from: heuristics mode A's configurations in
// its ranking order, then the fallback list, deduplicated; notes and the rules'
// refusal filled in, no plan built (workspace stays -1). Mode B is left out: its
// query costs more than the plans it would add are worth here.
std::vector<EngineCandidate> heuristic_engine_candidates(const ConvKey& key);

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
