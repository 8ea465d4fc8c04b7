// Graph runners rebuilt from serialized execution plans: a plan entry's (with
// the prefetch pool that loads a plan's others ahead of their first calls), a
// compile worker's, or the execution plan cache's. No heuristics query, no
// engine build, no runtime compilation; the result is checked against the
// call's configuration and the contract's rules.
#pragma once

#include "run/engine_name.h"
#include "run/runner.h"
#include "store/serialized_execution_plan.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

// The runner for `wanted` on key's problem from `bytes`, a serialized execution
// plan of the same problem, loaded on the current device. nullptr when it
// cannot serve: with *why set when the bytes are at fault, empty when the
// contract's rules refuse the configuration (the regular build then reports
// that refusal, with the alternatives).
std::shared_ptr<const Runner> graph_runner_from_bytes(const ConvKey& key, const EngineName& wanted,
                                                      const std::vector<uint8_t>& bytes, std::string* why);

// The runner for `wanted` rebuilt from the serialized execution plan `plan`
// carries for key's configuration, or nullptr (none, or it cannot serve: the
// caller builds the runner as without one; a failure warns once per entry).
// The first such call on a device starts loading the plan's other serialized
// execution plans ahead (TORCH_CUDNN_ALGO_PLAN_PREFETCH_THREADS workers).
std::shared_ptr<const Runner> runner_from_serialized_plan(const ConvKey& key, const EngineName& wanted,
                                                          const SerializedExecutionPlanSource& plan);

}  // namespace torch_cudnn_algo
