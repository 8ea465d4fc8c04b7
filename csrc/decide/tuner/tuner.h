// The "fastest" tuner's parts (see fastest_tuner.h), shared by the files of
// this folder: candidates (the heuristics' candidates, their builds, the
// prepare-ahead queue), operands (random operands, the float64 reference),
// timing (warm-up, and the timed rounds of interleaved_timing.h on the GPU),
// knob_search, wide_search, log (the tuning-log entry) and fastest_tuner (the
// decision). Included by those alone.
#pragma once

#include "base/conv_key.h"
#include "decide/choice.h"
#include "run/direct_runner.h"
#include "run/engine_name.h"
#include "run/runner.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace torch_cudnn_algo {
namespace tuner {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Repetitions per candidate of a first-round (and knob-search) timing; in the
// first round, the probe is the first of them.
constexpr int kFirstRoundReps = 3;
// A pick must beat stock's configuration by this much (relative) to replace it:
// below it, the difference is within the timing noise of a few calls.
constexpr double kMinGain = 0.01;

struct Candidate {
  EngineName engine;  // the engine configuration (none for our kernel): what builds it
  bool rtc = false;  // cuDNN's RUNTIME_COMPILATION behaviour note: the build compiles a kernel
  bool builds_from_name = true;  // no heuristics query to build it (see EngineCandidate)
  // Built with cuDNN's default knob values although its bare name would mean
  // the heuristics' first-ranked ones: a fallback entry whose engine no other
  // entry lists, where both are the same configuration.
  bool default_knobs = false;
  bool kernel = false;  // one of our own kernels ("tca.direct"): nothing to build, never stock's
  // As logged and picked: the configuration's canonical name, or our kernel's.
  std::string name() const { return kernel ? std::string(kDirectKernelName) : engine.canonical; }
  int rank = -1;     // position in the heuristics' list; -1 for a knob-search configuration
  std::string source;  // the list cuDNN offered it in: "heuristics_a", "heuristics_b" or "fallback"
  bool extra = false;  // the wide search's (see wide_search)
  enum class Probe { kNone, kNear, kFar } probe = Probe::kNone;  // its first timed call against the best one's
  std::shared_ptr<const Runner> runner;  // null until built, or when cuDNN cannot build it
  std::vector<double> samples_ms;  // GPU time per call
  std::vector<double> host_us;     // host time to enqueue one call
  bool is_stock_config = false;
  bool built = false;     // build attempted
  bool cached = false;    // the runner was already in the runner cache (nothing built)
  bool deferred = false;  // runtime-compiled and over the tuner's budget: not built (yet)
  double build_s = 0;     // wall seconds of its build (on its build thread)
  double warmup_ms = std::numeric_limits<double>::quiet_NaN();  // host ms of its first run

  bool runnable() const { return runner && runner->refusal.empty(); }
  double median_ms() const { return median_of(samples_ms); }
  double median_host_us() const { return median_of(host_us); }

 private:
  static double median_of(std::vector<double> values) {
    if (values.empty()) return std::numeric_limits<double>::infinity();
    std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
    return values[values.size() / 2];
  }
};

// Where one tuning's time went, in wall seconds (see tuning_log_entries).
struct Breakdown {
  double heuristics_s = 0;  // the heuristics query for the candidates
  double build_s = 0;       // runner builds, wall (parallel threads)
  double build_sum_s = 0;   // runner builds, the sum of each candidate's build
  double wait_s = 0;        // waiting for the builds prepared ahead (tune())
  double operands_s = 0;    // random operands, workspace
  double warmup_s = 0;      // each candidate's first run, synchronised
  double timing_s = 0;      // the timed rounds
  double accuracy_s = 0;    // float64 reference and the error checks
  double knob_s = 0;        // conv_knob_search, all of it (builds and timing included)
};

// What a tuning builds before it runs anything: the candidates in the
// heuristics' order with their runners built (runtime-compiled ones over the
// budget deferred), stock's configuration among them, and what it took.
struct Prepared {
  std::vector<Candidate> candidates;
  std::set<std::string> known;  // every name in candidates
  std::optional<size_t> stock_config;
  size_t listed = 0;  // configurations the heuristics offered that the rules allow
  Breakdown spent;    // heuristics_s, build_s, build_sum_s
  bool ahead = false;  // prepared by prepare_fastest's threads
};

// How wide key's tuning searches: besides heuristics A's first round, the
// configurations of the fallback list (grouped convolutions that
// are not depthwise), and with TORCH_CUDNN_ALGO_TUNE_WIDE=2 also heuristics
// B's (every grouped convolution), each probed once; 0 turns it off.
enum class WideSearch { kOff, kFallback, kFallbackAndModeB };
WideSearch wide_search(const ConvKey& key);
// Whether `configuration` is still worth a probe on key: false once its
// engine's probes on this process's convolutions of key's kind were never near
// the best.
bool worth_probing(const ConvKey& key, const EngineName& configuration);
// Records one probe of `configuration` on key.
void note_probe(const ConvKey& key, const EngineName& configuration, bool near_best);

// Threads that build candidates (TORCH_CUDNN_ALGO_TUNE_THREADS).
size_t build_threads();

// first, first + 1, ..., end - 1.
std::vector<size_t> index_range(size_t first, size_t end);

// Builds the runners of candidates[indices] in parallel threads, each with its
// own cuDNN handle; a runner that cannot be built stays null. Runners land in
// the runner cache, so the pick runs later without being built again. Each
// candidate's build seconds are taken on its thread; the call returns its
// wall seconds.
double build_runners(const ConvKey& key, std::vector<Candidate>& candidates, const std::vector<size_t>& indices,
                     size_t max_threads);

// The heuristics' candidates under the rules, in their ranking; the first
// round's runners built with up to `threads` threads.
Prepared prepare(const ConvKey& key, size_t threads);

// key's preparation, once done; nullopt if none was queued or it failed (the
// tuning then prepares inline, and meets the error itself).
std::optional<Prepared> take_prepared(const ConvKey& key);

// Returns once nothing is queued or building, the threads joined.
void wait_until_prepared_all();

// Random operands of the cuDNN problem x (*) w = y in the key's layout, and
// the output of key's direction: fwd (x, w) -> y; bwd_data (y, w) -> x;
// bwd_filter (x, y) -> w.
struct Operands {
  at::Tensor x, w, y;
  at::Tensor a, b, out;
};

// Random operands of key's problem (see Operands).
Operands make_operands(const ConvKey& key);

// Stock PyTorch's result of key's direction in float64 on the same operands
// (this thread is bypassed, so it never comes back to us).
at::Tensor float64_reference(const ConvKey& key, const Operands& o);

// max |out - ref| / max |ref|; NaN anywhere gives infinity.
double max_relative_error(const at::Tensor& out, const at::Tensor& reference);

class Tuner {
 public:
  explicit Tuner(const ConvKey& key) : key_(key), started_(Clock::now()) {}

  std::shared_ptr<const Choice> run();
  // The decision's tuning-log entry, once run() returned.
  const std::string& log_entry() const { return log_entry_; }

 private:
  void build(const std::vector<size_t>& indices);
  bool within_limit(const Candidate& c) const;
  void prepare_workspace();
  std::vector<size_t> warm_up(std::vector<size_t> indices);
  std::vector<size_t> first_round(const std::vector<size_t>& warmed);
  void time_interleaved(const std::vector<size_t>& indices, int reps);
  double spin_cycles_per_us() const;
  std::vector<size_t> by_median(std::vector<size_t> indices) const;
  void search_knobs(std::vector<size_t>& finalists);
  bool accurate(size_t index);
  double error_of(size_t index);
  void record(const Candidate* pick, size_t timed);

  ConvKey key_;
  Clock::time_point started_;
  std::vector<Candidate> candidates_;
  std::set<std::string> known_;  // every name in candidates_
  std::optional<size_t> stock_config_;
  Operands operands_;
  c10::DataPtr workspace_;
  size_t workspace_bytes_ = 0;
  at::Tensor reference_;
  size_t listed_ = 0;  // configurations the heuristics offered that the rules allow
  size_t knob_configs_ = 0;
  size_t probed_ = 0;  // candidates probed (the first round's, see first_round)
  size_t retimed_batches_ = 0;  // attempts at timing a batch's late calls again (time_interleaved)
  double pick_error_ = std::numeric_limits<double>::quiet_NaN();
  double stock_error_ = std::numeric_limits<double>::quiet_NaN();
  double error_bound_ = std::numeric_limits<double>::quiet_NaN();
  Breakdown spent_;
  bool prepared_ahead_ = false;
  bool in_knob_search_ = false;  // build/warm-up/timing seconds then count as knob_s
  std::string log_entry_;
};

}  // namespace tuner
}  // namespace torch_cudnn_algo
