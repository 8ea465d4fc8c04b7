// A Runner runs one pinned choice (a legacy algorithm or a graph-API engine
// configuration) on one convolution problem. Built once per configuration,
// immutable afterwards, shared by every thread.
#pragma once

#include "base/conv_key.h"

#include <atomic>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

struct Runner {
  virtual ~Runner() = default;

  ConvKey key;
  // What runs, as the user would name it: "1 (IMPLICIT_PRECOMP_GEMM)" or the
  // full engine configuration name "eng62_k2=1_k13=1_k18=0".
  std::string choice;
  // Why the pinned choice cannot run this problem; empty when it can.
  std::string refusal;
  // The refusal comes from the contract's rules (determinism, TF32), not from
  // cuDNN lacking support: the profile table tells the two apart.
  bool refused_by_rule = false;
  // On refusal: choices of the same kind that could run it instead.
  std::vector<std::string> alternatives;
  // Exactly what cuDNN reported this choice needs.
  size_t workspace_bytes = 0;
  // Rebuilt from a serialised execution runner (a runner file's) instead of being
  // built here: no heuristics query, no engine compilation.
  bool deserialized = false;
  // Set by the first refusal warning, so each configuration warns once.
  mutable std::atomic<bool> warned{false};
  // Set by the first "workspace could not be allocated" warning.
  mutable std::atomic<bool> warned_out_of_memory{false};
  // The workspace limit last warned about for this runner (-1: none yet).
  mutable std::atomic<int64_t> warned_limit{-1};
  // Set when the "requested ... is set" line was logged: once per runner, also
  // when profiling built the runner before the first pinned call.
  mutable std::atomic<bool> announced{false};

  // Executes on the current stream. Operands by direction, all canonical in
  // key.format():  fwd (x, w) -> y;  bwd_data (dy, w) -> dx;  bwd_filter (x, dy) -> dw.
  // `workspace` holds at least workspace_bytes: the caller allocates it, so a
  // failed allocation is decided before anything is written (see select_runner).
  virtual void run(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                   void* workspace) const = 0;
};

}  // namespace torch_cudnn_algo
