// The "fastest" policy's tuner: picks the engine configuration to run for one
// convolution configuration in tens of milliseconds, entirely in C++ (no
// Python, no GIL, no full profile table).
//
// Candidates are heuristics mode A's first configurations in cuDNN's own
// ranking (4 of them; stock's benchmark mode times the first ten of the same
// list; 10 for grouped convolutions, which the fallback list's configurations
// join, each probed once first: the wide search,
// wide_search.cpp), runtime-compiled ones beyond stock's own only up to a budget (their
// build compiles a kernel); stock's own configuration (A's first usable one,
// what stock runs without benchmark mode) is always among them. Each runner is
// built once, in parallel threads (tune(): every configuration's, ahead of the
// first timing), straight into the runner cache the pinned path reads.
// Timing: CUDA events around single calls queued behind a spin kernel, so the
// host's enqueue time never leaks into GPU time; a short first round, then the
// finalists and stock's configuration re-timed together, interleaved. A pick
// replaces stock's configuration only when measured at least 1% faster, no
// costlier to launch, and no less accurate: its error against a float64
// reference at most twice that of stock's configuration on the same operands,
// plus the dtype's tolerance. With conv_knob_search, the best engines' knob
// spaces are searched (one knob at a time, within a time budget) before the
// final round.
#pragma once

#include "base/conv_key.h"
#include "decide/flag_state.h"

#include <memory>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

// The configuration to run for key's problem (key.algo ignored), or nullptr
// for the stock path (nothing runnable, or nothing beat stock's configuration
// and stock's configuration itself is not available). Must run outside CUDA
// graph capture, with this thread bypassed (the float64 reference runs stock).
// Errors propagate; the caller decides what a failed tuning means. `log_entry`,
// if given, receives the decision's tuning-log entry (see tuning_log_entries).
std::shared_ptr<const Choice> tune_fastest(const ConvKey& key, std::string* log_entry = nullptr);

// Queues key's candidate runners to be built ahead in background threads (no GPU
// work, nothing timed): tune() knows every configuration first, and builds of
// different configurations overlap. The next tune_fastest of key waits for
// them alone and times them while later configurations are still being built.
void prepare_fastest(ConvKey key);
// Drops queued preparations and results not taken; returns once no thread builds.
void cancel_prepared_fastest();

// Forgets what the wide search learnt of engines (see wide_search.cpp).
void clear_wide_search_record();

// conv_knob_search: also search knob values the heuristics do not list.
bool knob_search_enabled();
// Sets it and returns the previous value. Decisions made with the other search
// are stale: the caller forgets them.
bool exchange_knob_search(bool enabled);

// One JSON object per tuning since clear_tuning_log (clear_cache), in order:
// {"direction", "conv", "dtype", "deterministic", "pick", "stock_config",
//  "pick_ms", "stock_config_ms", "pick_host_us", "stock_config_host_us",
//  "candidates", "timed", "knob_configs", "probed", "seconds", "workspace",
//  "max_rel_error", "stock_config_max_rel_error", "max_rel_error_bound",
//  "prepared_ahead", "built", "built_rtc", "listed_rtc", "deferred_rtc",
//  "time_s": {"heuristics", "build", "build_sum", "wait", "operands", "warmup",
//             "timing", "accuracy", "knob_search"},
//  "configs": [{"config", "rank", "source", "extra", "probe", "rtc", "build_s",
//               "cached", "runnable", "warmup_ms", "ms"}, ...]}.
std::vector<std::string> tuning_log_entries();
void clear_tuning_log();

// The largest max |out - ref| / max |ref| (ref in float64) a pick may show;
// the same values as torch_cudnn_algo.TOLERANCES (a CPU test compares them).
double tuner_tolerance(at::ScalarType dtype, bool allow_tf32);

}  // namespace torch_cudnn_algo
