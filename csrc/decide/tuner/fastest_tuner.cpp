// The "fastest" tuner's decision (see fastest_tuner.h): the candidates
// prepared, warmed up and timed, the finalists re-timed with stock's
// configuration, and the pick checked against stock's on time, host time and
// accuracy.
#include "decide/tuner/fastest_tuner.h"
#include "decide/tuner/interleaved_timing.h"
#include "decide/tuner/tuner.h"

#include "base/cudnn_handle.h"

#include <c10/cuda/CUDAGuard.h>

#include <cmath>

namespace torch_cudnn_algo {
namespace tuner {
namespace {

// Best first-round candidates re-timed with stock's configuration.
constexpr size_t kFinalists = 3;
constexpr int kFinalReps = 7;
// A pick's error against float64 may be at most this many times the error of
// stock's configuration on the same operands (plus the dtype's tolerance).
constexpr double kMaxErrorRatio = 2.0;
// Host time per call to launch a pick, beyond stock's configuration's: up to
// this much more (relative, plus an absolute slack for timer noise) is free.
// cuDNN's engines differ in what their launch costs the CPU (several kernels,
// cuBLASLt-backed GEMMs), and in a host-bound stretch of an eager step every
// added host microsecond is wall time, while in a GPU-bound one only the GPU
// time counts. Beyond the free allowance, a pick must save at least
// kGpuSavedPerHostAdded times the host time it adds in GPU time: without a host
// limit picks could cost far more host time than stock's, and without an
// allowance beyond the free one a much faster engine could lose for a few
// microseconds of host time.
constexpr double kMaxHostIncrease = 0.10;
constexpr double kHostSlackUs = 2.0;
constexpr double kGpuSavedPerHostAdded = 2.0;
// A candidate is timed in full when its probe (one call) takes at most this
// many times the best probe: one call is noisy, and the finalists' round
// decides among the near ones. The rest cannot win, and timing them in full
// cost more than the near ones: cuDNN's lists hold engines 50-500x slower than
// the best, some of them launching per group (ConvTasNet's depthwise layers:
// 11.8 ms of GPU time and 22 ms of host time a call, against 0.037 ms for the
// best), and our own kernel runs every convolution of few enough products per
// output but wins only on some (on ResNeXt's dense layers it took 10-270x
// cuDNN's best, 126 ms a round summed over the network on an H200).
constexpr double kProbeNearBest = 1.5;
constexpr size_t kExtraWorkspaceFloor = size_t{64} << 20;

}  // namespace

void Tuner::build(const std::vector<size_t>& indices) {
  const double wall = build_runners(key_, candidates_, indices, build_threads());
  if (in_knob_search_) return;
  spent_.build_s += wall;
  for (const size_t i : indices) spent_.build_sum_s += candidates_[i].build_s;
}

bool Tuner::within_limit(const Candidate& c) const {
  return fits_workspace_limit(c.runner->workspace_bytes);
}

// Candidate `index`'s max relative error against the float64 reference on the
// tuner's operands.
double Tuner::error_of(size_t index) {
  if (!reference_.defined()) reference_ = float64_reference(key_, operands_);
  candidates_[index].runner->run(operands_.a, operands_.b, operands_.out, workspace_.get());
  return max_relative_error(operands_.out, reference_);
}

// Whether a pick is no less accurate than stock's configuration: its error
// against float64 at most twice the error of stock's configuration on the same
// operands, plus the dtype's tolerance as a floor (an exact stock result must
// not rule out every other summation order). Without a runnable stock
// configuration (or a finite error of it), the tolerance alone.
bool Tuner::accurate(size_t index) {
  const auto started = Clock::now();
  const double floor = tuner_tolerance(key_.scalar_type(), key_.allow_tf32);
  if (stock_config_ && candidates_[*stock_config_].runnable() && std::isnan(stock_error_)) {
    stock_error_ = error_of(*stock_config_);
  }
  error_bound_ = std::isfinite(stock_error_) ? kMaxErrorRatio * stock_error_ + floor : floor;
  pick_error_ = error_of(index);
  spent_.accuracy_s += seconds_since(started);
  return pick_error_ <= error_bound_;
}

// Times the first round: every candidate once (the probe), then those within
// kProbeNearBest of the best probe kFirstRoundReps - 1 times more. Returns the
// candidates timed in full.
std::vector<size_t> Tuner::first_round(const std::vector<size_t>& warmed) {
  time_interleaved(warmed, 1);
  std::vector<double> probe_ms;
  for (const size_t i : warmed) probe_ms.push_back(candidates_[i].samples_ms.front());
  const std::vector<bool> near_flags = near_best(probe_ms, kProbeNearBest);
  std::vector<size_t> near;
  for (size_t k = 0; k < warmed.size(); ++k) {
    const size_t i = warmed[k];
    auto& c = candidates_[i];
    const bool is_near = near_flags[k];
    c.probe = is_near ? Candidate::Probe::kNear : Candidate::Probe::kFar;
    // Only the wide search's engines keep a record across convolutions (see worth_probing).
    if (c.extra) note_probe(key_, c.engine, is_near);
    if (is_near) near.push_back(i);
  }
  probed_ += warmed.size();
  time_interleaved(near, kFirstRoundReps - 1);
  return near;
}

std::shared_ptr<const Choice> Tuner::run() {
  key_.algo = kNoChoice;
  const auto wait_started = Clock::now();
  std::optional<Prepared> prepared = take_prepared(key_);
  if (prepared) {
    spent_.wait_s = seconds_since(wait_started);
  } else {
    prepared = prepare(key_, build_threads());
  }
  candidates_ = std::move(prepared->candidates);
  known_ = std::move(prepared->known);
  stock_config_ = prepared->stock_config;
  listed_ = prepared->listed;
  prepared_ahead_ = prepared->ahead;
  spent_.heuristics_s = prepared->spent.heuristics_s;
  spent_.build_s = prepared->spent.build_s;
  spent_.build_sum_s = prepared->spent.build_sum_s;
  // The wide search must not make a tuning hold much more memory than
  // heuristics A's candidates do: an extra's workspace is at most the largest
  // of theirs, or kExtraWorkspaceFloor.
  size_t regular_workspace = kExtraWorkspaceFloor;
  for (const auto& c : candidates_) {
    if (!c.extra && c.runnable()) regular_workspace = std::max(regular_workspace, c.runner->workspace_bytes);
  }
  std::vector<size_t> eligible;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    const Candidate& c = candidates_[i];
    if (!c.runnable() || !within_limit(c)) continue;
    // An extra prepared ahead may have lost its probes on other convolutions since.
    if (c.extra && (c.runner->workspace_bytes > regular_workspace || !worth_probing(key_, c.engine))) continue;
    eligible.push_back(i);
  }
  // Stock's configuration is timed even over the workspace limit: it is the
  // measure a pick must beat, though it cannot be picked then.
  std::vector<size_t> timed = eligible;
  if (stock_config_ && !within_limit(candidates_[*stock_config_])) timed.insert(timed.begin(), *stock_config_);
  if (eligible.empty()) {
    record(nullptr, 0);
    return nullptr;
  }
  const auto operands_started = Clock::now();
  operands_ = make_operands(key_);
  spent_.operands_s += seconds_since(operands_started);
  timed = warm_up(timed);
  const std::vector<size_t> near = first_round(timed);

  std::vector<size_t> finalists;
  for (const size_t i : by_median(near)) {
    if (finalists.size() < kFinalists && within_limit(candidates_[i])) finalists.push_back(i);
  }
  if (knob_search_enabled()) {
    const auto knobs_started = Clock::now();
    in_knob_search_ = true;
    search_knobs(finalists);
    in_knob_search_ = false;
    spent_.knob_s += seconds_since(knobs_started);
  }
  // (Stock's configuration is the measure; a cuDNN error in its warm-up leaves no runner to time.)
  if (stock_config_ && candidates_[*stock_config_].runnable() &&
      std::find(finalists.begin(), finalists.end(), *stock_config_) == finalists.end()) {
    finalists.push_back(*stock_config_);
  }
  time_interleaved(finalists, kFinalReps);

  const Candidate* stock = stock_config_ ? &candidates_[*stock_config_] : nullptr;
  const bool stock_pickable = stock && within_limit(*stock);
  const double host_budget_us =
      stock ? stock->median_host_us() * (1 + kMaxHostIncrease) + kHostSlackUs
            : std::numeric_limits<double>::infinity();
  const Candidate* pick = nullptr;
  for (const size_t i : by_median(finalists)) {
    const Candidate& c = candidates_[i];
    if (!within_limit(c)) continue;
    if (stock && &c != stock) {
      const double host_added_us = c.median_host_us() - host_budget_us;
      const double gpu_saved_us = (stock->median_ms() - c.median_ms()) * 1e3;
      if (host_added_us > 0 && gpu_saved_us < kGpuSavedPerHostAdded * host_added_us) {
        continue;  // saves too little GPU time for what it adds to the host's
      }
    }
    if (stock && &c != stock && c.median_ms() >= stock->median_ms() * (1 - kMinGain)) {
      // Not clearly faster than stock's configuration: keep stock's.
      pick = stock_pickable ? stock : nullptr;
      break;
    }
    if (&c == stock || accurate(i)) {
      pick = &c;
      break;
    }
  }
  record(pick, timed.size() + knob_configs_);
  if (pick == nullptr) return nullptr;
  auto choice = std::make_shared<Choice>();
  if (pick->kernel) {
    choice->kernel = pick->name();
  } else {
    choice->engine = pick->engine;
  }
  return choice;
}

}  // namespace tuner

std::shared_ptr<const Choice> tune_fastest(const ConvKey& key, std::string* log_entry) {
  const c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(key.device));
  tuner::Tuner tuner(key);
  auto choice = tuner.run();
  if (log_entry != nullptr) *log_entry = tuner.log_entry();
  return choice;
}

}  // namespace torch_cudnn_algo
