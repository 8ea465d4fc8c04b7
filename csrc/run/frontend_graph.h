// The cuDNN frontend as the graph runners use it: bound to the cuDNN torch
// loaded, a convolution's operation graph (ConvGraph reads what the frontend
// keeps protected), the configurations cuDNN lists for it, and the contract's
// precision rules applied to a configuration's notes. Only the run layer's
// frontend-side files include it (it brings in the whole frontend).
#pragma once

#include "base/conv_key.h"
#include "run/variant_pack_cache.h"

#include <cudnn_frontend.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torch_cudnn_algo {

namespace fe = cudnn_frontend;

// Points the frontend at the cuDNN torch already loaded (same soname, so
// RTLD_NOLOAD finds it): one cuDNN per process.
void bind_frontend_to_cudnn();

// The frontend keeps each configuration's notes and backend descriptor in its
// protected plan list; this subclass reads them.
class ConvGraph : public fe::graph::Graph {
 public:
  // The plan Graph::serialize writes: the last one built (or the deserialised one).
  int64_t serialized_plan_index() const { return plans.candidate; }
  // Graph::create_execution_plan with each knob given by its backend type id.
  // The frontend's knob enum has no word for several backend knob types that
  // cuDNN's older engines still report and name (SPLIT_K k0, USE_TEX k3,
  // KBLOCK k5, LDGA k6, LDGC k22...), so Graph::create_execution_plan refuses
  // every configuration of those engines, and building one by name fell back
  // to a full heuristics query: heuristics mode B, which the frontend
  // serialises process-wide and which is slow (parallel builds then wait on
  // that lock).
  fe::error_t create_execution_plan_with_backend_knobs(int64_t engine_id,
                                                      const std::vector<std::pair<int64_t, int64_t>>& knobs);
  // How many knobs cuDNN reports for `engine_id` on this graph (deprecated
  // knob types included), or -1 if the query fails.
  int64_t knob_count(int64_t engine_id);
  // The built (or deserialised) execution plan at `index`, or nullptr.
  const fe::ExecutionPlan* execution_plan_at(int64_t index) const;
  // Numerical notes read off a built plan: a deserialised graph has no engine
  // configuration list, so numerical_notes_at does not apply to it.
  std::vector<std::string> built_numerical_notes_at(int64_t index) const;
  std::vector<std::string> numerical_notes_at(int64_t index) const;
  std::vector<std::string> behavior_notes_at(int64_t index) const;

  // The built plan's backend descriptor, what cudnnBackendExecute runs.
  cudnnBackendDescriptor_t backend_plan_at(int64_t index) const {
    return plans.execution_plans.at(index)->get_raw_desc();
  }

  // Whether executing the plan at `index` needs nothing but a variant pack of
  // the three operands and the workspace: no frontend-managed workspace, no
  // auxiliary slots, no CUDA-graph retention of a runtime-compiled plan. Only
  // meaningful once the frontend prepared its variant-pack template (after the
  // first execute).
  bool plain_variant_pack_at(int64_t index, int64_t workspace_bytes) const {
    const auto& pack = varpack_template;
    const auto& plan = *plans.execution_plans.at(index);
    return pack.all_uids == std::vector<int64_t>{kUidX, kUidW, kUidY} &&
           pack.user_slots.size() == 3 && pack.workspace_slots.empty() &&
           pack.replacement_slots.empty() && pack.backend_slots.empty() &&
           plan.getWorkspaceSize() == workspace_bytes && !plan.needs_cuda_graph_retention();
  }
};

// The precision and determinism rules of the contract, applied to one
// configuration's notes; returns why it is refused, or "".
std::string precision_refusal(const ConvKey& key, const std::vector<std::string>& notes);

// A frontend status's message (get_message() is not const).
std::string message_of(fe::error_t status);

// The operation graph of `key`'s direction; throws with cuDNN's message if the
// graph API rejects the problem.
std::unique_ptr<ConvGraph> make_graph(const ConvKey& key, cudnnHandle_t handle);

// One configuration cuDNN lists for a graph.
struct Listed {
  int64_t index;  // execution plan index in the graph
  std::string name;
  const char* source;
};

// Heuristics A, B (unless `with_mode_b` is false: its query is the slow one),
// then the fallback list, deduplicated by name.
std::vector<Listed> enumerate(ConvGraph& graph, bool with_mode_b = true);

// `engine`'s tunable knobs on this graph: "k2=0..3 k13=0..1".
std::string knob_space(ConvGraph& graph, int64_t engine);

}  // namespace torch_cudnn_algo
