// A graph runner: GraphRunner runs one cuDNN execution plan, of one engine
// configuration on one convolution, through the cuDNN frontend 1.x (conv_fprop,
// conv_dgrad and conv_wgrad graphs); how one is built (heuristics query only
// when the configuration cannot be built straight from its name), and its
// serialized form. Nothing here reads the user's plan or a cache: where a
// runner comes from is graph_runner_source.h's.
#pragma once

#include "run/engine_name.h"
#include "run/runner.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

class ConvGraph;  // run/frontend_graph.h

// Runs one execution plan of its ConvGraph.
struct GraphRunner final : Runner {
  std::unique_ptr<ConvGraph> graph;
  int64_t plan_index = -1;
  // Decided after the first execute (see ConvGraph::plain_variant_pack_at):
  // whether calls may skip the frontend and reuse cached variant packs.
  enum : int8_t { kUndecided, kReusePacks, kThroughFrontend };
  mutable std::atomic<int8_t> execution{kUndecided};

  ~GraphRunner() override;
  void run(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
           void* workspace) const override;
};

// The runner for `wanted` on key's problem, built here: exactly from its name
// when it can be, else through a heuristics query (counted in
// execution_plan_counts). A configuration cuDNN cannot run (or the rules
// refuse) gives a runner with its refusal and the alternatives. Must run with
// key.device current.
std::shared_ptr<const Runner> build_graph_runner(const ConvKey& key, const EngineName& wanted);

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
SerializedBytes build_serialized_execution_plan(const ConvKey& key, const EngineName& engine);

}  // namespace torch_cudnn_algo
