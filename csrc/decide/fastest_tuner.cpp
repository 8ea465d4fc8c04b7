#include "decide/fastest_tuner.h"

#include "base/cudnn_handle.h"
#include "base/python_bridge.h"
#include "base/work_queue.h"
#include "decide/plan.h"
#include "run/engine_enumeration.h"
#include "run/engine_name.h"
#include "run/graph_runner.h"
#include "run/runner.h"

#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/cuda/Sleep.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

namespace torch_cudnn_algo {
namespace {

// Heuristics A's first entries built and timed in the first round. Stock's
// benchmark mode times ten of this list; on the H100 the fastest of the first 12
// was among the first 4 for 277 of 285 configurations (mobilenet_v3_large,
// efficientnet_b0, conv_tasnet), 0.1-1.5% more GPU time summed over a network,
// while the other 8 took two thirds of the runner builds and 95% of the first
// round's GPU time (slow engines).
constexpr size_t kFirstRoundCandidates = 4;
// Grouped convolutions that are not depthwise (several channels per group) time
// ten, as stock's benchmark mode does: there the heuristics rank the fastest
// engines lower. On regnety_016 (group width 24) the picks among ranks 4-9 ran
// its grouped 3x3 layers 2-2.6x faster than the best of the first 4: 0.53 of
// the 0.55 ms the lower ranks saved, summed over the network's distinct
// configurations; on resnext50_32x4d and efficientnet_b0 they saved 0.01 ms.
constexpr size_t kGroupedFirstRoundCandidates = 10;
constexpr int kFirstRoundReps = 3;
// Runtime-compiled configurations (RUNTIME_COMPILATION note) built besides
// stock's own: building one compiles its kernel (NVRTC), 0.3-1 s on the H100
// against well under 1 ms for most precompiled engines' runners.
constexpr int64_t kRtcCandidates = 1;
// Best first-round candidates re-timed with stock's configuration.
constexpr size_t kFinalists = 3;
constexpr int kFinalReps = 7;
// A pick must beat stock's configuration by this much (relative) to replace it:
// below it, the difference is within the timing noise of a few calls.
constexpr double kMinGain = 0.01;
// A pick's error against float64 may be at most this many times the error of
// stock's configuration on the same operands (plus the dtype's tolerance).
constexpr double kMaxErrorRatio = 2.0;
// Host time per call to launch a pick, beyond stock's configuration's: up to
// this much more (relative, plus an absolute slack for timer noise) is free.
// cuDNN's engines differ in what their launch costs the CPU (several kernels,
// cuBLASLt-backed GEMMs), and in a host-bound stretch of an eager step every
// added host microsecond is wall time, while in a GPU-bound one only the GPU
// time counts. Beyond the free allowance, a pick must save at least
// kGpuSavedPerHostAdded times the host time it adds in GPU time. Without any
// host limit, ConvTasNet's 1x1 backward calls cost 366 us of host time per call
// against stock's 141 us; with no allowance beyond the free one, ResNeXt's
// grouped 3x3 filter gradient kept stock's 0.82 ms engine over one taking
// 0.14 ms for 10 us more host time per call (H100, 2026-11-24).
constexpr double kMaxHostIncrease = 0.10;
constexpr double kHostSlackUs = 2.0;
constexpr double kGpuSavedPerHostAdded = 2.0;
// conv_knob_search: engines searched and the time allowed per configuration.
constexpr size_t kKnobSearchEngines = 2;
constexpr double kKnobSearchSeconds = 1.0;
// Values tried per knob: a knob with a wider range is sampled evenly.
constexpr int64_t kMaxValuesPerKnob = 12;
// Spin ahead of a timed batch, per call: more than the host needs to enqueue
// one call and its two events, so the GPU never waits for the host.
constexpr int64_t kSpinCyclesPerCall = 80'000;  // ~40 us at H100 clocks
// A batch whose spin ran out before the host had queued every call may have
// timed the GPU waiting for the host: it is timed again; if the host falls
// behind again, the batch waits until no build runs in the process and is
// timed a last time. Some engines take milliseconds of host time per call
// (RegNetY's and ResNeXt's grouped layers: up to 3.4 ms, launching per group),
// so each call's share of the spin is at least kSpinPerHostTime times the
// least host time its candidate took so far; and the host is held up by builds
// on other threads (a launch waited up to ~100 ms beside runtime compilation
// on the H100), so each attempt at least doubles the spin.
constexpr int kMaxTimingAttempts = 3;
constexpr double kSpinPerHostTime = 1.5;

std::atomic<bool> g_knob_search{false};
std::mutex g_log_mutex;

std::vector<std::string>& log_entries() {
  static auto* entries = new std::vector<std::string>();  // leaked, like the caches
  return *entries;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Candidate {
  std::string name;  // canonical engine configuration name
  bool rtc = false;  // cuDNN's RUNTIME_COMPILATION behaviour note: the build compiles a kernel
  int rank = -1;     // position in the heuristics' list; -1 for a knob-search configuration
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

size_t build_threads() {
  const int64_t fallback = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 8);
  return static_cast<size_t>(std::max<int64_t>(1, env_int("TORCH_CUDNN_ALGO_TUNE_THREADS", fallback)));
}

// The first round's size for `key` (TORCH_CUDNN_ALGO_TUNE_CANDIDATES overrides
// it for every convolution, for measurements).
size_t first_round_candidates(const ConvKey& key) {
  const bool grouped = key.groups > 1 && key.input_sizes[1] / key.groups > 1;
  const size_t size = grouped ? kGroupedFirstRoundCandidates : kFirstRoundCandidates;
  return static_cast<size_t>(
      std::max<int64_t>(1, env_int("TORCH_CUDNN_ALGO_TUNE_CANDIDATES", static_cast<int64_t>(size))));
}

// Runtime-compiled configurations among the first round's that are built
// besides stock's own, in the heuristics' order
// (TORCH_CUDNN_ALGO_TUNE_RTC_CANDIDATES overrides it; negative: all).
int64_t rtc_candidates() {
  return env_int("TORCH_CUDNN_ALGO_TUNE_RTC_CANDIDATES", kRtcCandidates);
}

// Builds the runners of candidates[indices] in parallel threads, each with its own
// cuDNN handle; a runner that cannot be built stays null. Plans land in the runner
// cache, so the pick runs later without being built again. Each candidate's
// build seconds are taken on its thread; the call returns its wall seconds.
double build_plans(const ConvKey& key, std::vector<Candidate>& candidates, const std::vector<size_t>& indices,
                   size_t max_threads) {
  if (indices.empty()) return 0;
  const auto started = Clock::now();
  std::atomic<size_t> next{0};
  const auto work = [&] {
    const c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(key.device));
    for (size_t k = next++; k < indices.size(); k = next++) {
      Candidate& c = candidates[indices[k]];
      const auto build_started = Clock::now();
      try {
        bool created = false;
        c.runner = get_graph_runner(key, c.name, &created, plan_execution_plans(), c.rtc);
        c.cached = !created;
      } catch (const std::exception&) {
        c.runner = nullptr;  // cuDNN cannot build it: not a candidate
      }
      c.built = true;
      c.deferred = false;
      c.build_s = seconds_since(build_started);
    }
  };
  const size_t threads = std::min(max_threads, indices.size());
  const WithoutGil unlocked;  // the builders (this thread among them) may log to Python
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();
  return seconds_since(started);
}

std::vector<size_t> index_range(size_t first, size_t end) {
  std::vector<size_t> indices;
  for (size_t i = first; i < end; ++i) indices.push_back(i);
  return indices;
}

// Random operands of the cuDNN problem x (*) w = y in the key's layout, and
// the output of key's direction: fwd (x, w) -> y; bwd_data (y, w) -> x;
// bwd_filter (x, y) -> w.
struct Operands {
  at::Tensor x, w, y;
  at::Tensor a, b, out;
};

Operands make_operands(const ConvKey& key) {
  const auto options = at::TensorOptions()
                           .dtype(key.scalar_type())
                           .device(at::kCUDA, static_cast<c10::DeviceIndex>(key.device))
                           .memory_format(key.format());
  Operands o;
  o.x = at::empty(key.input(), options).normal_();
  o.w = at::empty(key.weight(), options).normal_();
  o.y = at::empty(key.output(), options).normal_();
  switch (key.dir()) {
    case Direction::kForward:
      o.a = o.x, o.b = o.w, o.out = allocate_output(key.output(), options);
      break;
    case Direction::kBackwardData:
      o.a = o.y, o.b = o.w, o.out = allocate_output(key.input(), options);
      break;
    case Direction::kBackwardFilter:
      o.a = o.x, o.b = o.y, o.out = allocate_output(key.weight(), options);
      break;
  }
  return o;
}

std::vector<int64_t> spatial(const std::array<int64_t, kMaxSpatialDims>& values, const ConvKey& key) {
  return {values.begin(), values.begin() + (key.dim - 2)};
}

// Stock PyTorch's result of key's direction in float64 on the same operands
// (this thread is bypassed, so it never comes back to us).
at::Tensor float64_reference(const ConvKey& key, const Operands& o) {
  const auto x = o.x.to(at::kDouble), w = o.w.to(at::kDouble), y = o.y.to(at::kDouble);
  const auto stride = spatial(key.stride, key), padding = spatial(key.padding, key),
             dilation = spatial(key.dilation, key);
  const std::vector<int64_t> zeros(key.dim - 2, 0);
  if (key.dir() == Direction::kForward) {
    return at::convolution(x, w, std::nullopt, stride, padding, dilation, false, zeros, key.groups);
  }
  const bool data = key.dir() == Direction::kBackwardData;
  auto grads = at::convolution_backward(y, x, w, std::nullopt, stride, padding, dilation, false,
                                        zeros, key.groups, {data, !data, false});
  return data ? std::get<0>(grads) : std::get<1>(grads);
}

// max |out - ref| / max |ref|; NaN anywhere gives infinity.
double max_relative_error(const at::Tensor& out, const at::Tensor& reference) {
  const double scale = reference.abs().max().item().toDouble();
  const double error = out.to(at::kDouble).sub(reference).abs().max().item().toDouble();
  if (std::isnan(error)) return std::numeric_limits<double>::infinity();
  return scale > 0 ? error / scale : error;
}

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

// `indices`' runners built with up to `threads` threads, their seconds counted in `spent`.
void build_into(const ConvKey& key, Prepared& p, const std::vector<size_t>& indices, size_t threads) {
  p.spent.build_s += build_plans(key, p.candidates, indices, threads);
  for (const size_t i : indices) p.spent.build_sum_s += p.candidates[i].build_s;
}

// Stock runs the first configuration of heuristics A that builds (mode A comes
// first in the list; fallback entries follow it). A runtime-compiled one left
// unbuilt ahead of the first that built would be stock's if it builds: it is
// built now, in list order, until stock's configuration is known.
void find_stock_config(const ConvKey& key, Prepared& p, size_t threads) {
  for (size_t i = 0; i < p.candidates.size() && !p.stock_config; ++i) {
    if (p.candidates[i].deferred) build_into(key, p, {i}, threads);
    if (p.candidates[i].runnable()) {
      p.stock_config = i;
      p.candidates[i].is_stock_config = true;
    }
  }
}

// The heuristics' candidates under the rules, in their ranking; the first
// round's runners built with up to `threads` threads.
Prepared prepare(const ConvKey& key, size_t threads) {
  Prepared p;
  const auto started = Clock::now();
  for (const auto& listed : heuristic_engine_candidates(key)) {
    if (!listed.refusal.empty()) continue;  // the determinism / TF32 rules
    const auto name = parse_engine_name(listed.name).canonical;
    if (!p.known.insert(name).second) continue;
    Candidate c;
    c.name = name;
    c.rank = static_cast<int>(p.candidates.size());
    c.rtc = std::find(listed.behavior_notes.begin(), listed.behavior_notes.end(),
                      "RUNTIME_COMPILATION") != listed.behavior_notes.end();
    p.candidates.push_back(std::move(c));
  }
  p.spent.heuristics_s = seconds_since(started);
  p.listed = p.candidates.size();
  // Heuristics A's ranking decides what the first round times; the rest of the
  // list (lower-ranked A entries, fallback) is built only if the first ones fail.
  const size_t round = first_round_candidates(key);
  const size_t considered = std::min(round, p.candidates.size());
  std::vector<Candidate> rest(p.candidates.begin() + considered, p.candidates.end());
  p.candidates.resize(considered);
  // Precompiled configurations are cheap to build; runtime-compiled ones are
  // not: the first entry (stock's configuration, unless it fails to build) and
  // the best-ranked others up to the budget. The rest are deferred.
  const int64_t rtc_budget = rtc_candidates();
  int64_t rtc_taken = 0;
  std::vector<size_t> first_builds;
  for (size_t i = 0; i < p.candidates.size(); ++i) {
    Candidate& c = p.candidates[i];
    if (c.rtc && i > 0 && rtc_budget >= 0) {
      if (rtc_taken >= rtc_budget) {
        c.deferred = true;
        continue;
      }
      ++rtc_taken;
    }
    first_builds.push_back(i);
  }
  build_into(key, p, first_builds, threads);
  find_stock_config(key, p, threads);
  while (!p.stock_config && !rest.empty()) {
    const size_t first = p.candidates.size();
    const size_t take = std::min(round, rest.size());
    p.candidates.insert(p.candidates.end(), rest.begin(), rest.begin() + take);
    rest.erase(rest.begin(), rest.begin() + take);
    build_into(key, p, index_range(first, p.candidates.size()), threads);
    find_stock_config(key, p, threads);
  }
  return p;
}

// tune() knows every configuration before it tunes the first: prepare_fastest
// queues each one's preparation (heuristics query and runner builds, no GPU
// work) to background threads, one configuration per thread, so that builds of
// different configurations overlap; a tuning then takes its configuration's
// result (waiting for it alone) and times it while the threads go on building
// the configurations after it. Runtime compilation serialises in the process
// (NVRTC holds a process-wide lock while it compiles), so the compiles are a
// chain that timing need not wait behind: on mobilenet_v3_large 29 compiles,
// ~7 s, against ~1 s of warm-up, timing and float64 checks (H100); compile
// workers in other processes share that chain (see compile_workers.h).
using PrepareQueue = WorkQueue<ConvKey, Prepared, ConvKeyHash>;

// One configuration's preparation on a queue thread; nullopt when it failed
// (not remembered: the tuning then prepares inline and reports the error).
std::optional<Prepared> prepare_ahead(const ConvKey& key) {
  try {
    const c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(key.device));
    Prepared prepared = prepare(key, 1);
    prepared.ahead = true;
    return prepared;
  } catch (...) {
    return std::nullopt;
  }
}

PrepareQueue& prepare_queue() {
  static auto* queue = new PrepareQueue(prepare_ahead, build_threads());  // leaked, like the caches
  return *queue;
}

// Returns once nothing is queued or building, the threads joined.
void wait_until_prepared_all() {
  const WithoutGil unlocked;  // the builders may log to Python
  prepare_queue().wait_idle();
}

// key's preparation, once done; nullopt if none was queued or it failed (the
// tuning then prepares inline, and meets the error itself).
std::optional<Prepared> take_prepared(const ConvKey& key) {
  const WithoutGil unlocked;  // the builders may log to Python
  return prepare_queue().take(key, PrepareQueue::IfQueued::kWait);
}

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
  size_t retimed_batches_ = 0;  // timed batches repeated because the host fell behind (time_interleaved)
  double pick_error_ = std::numeric_limits<double>::quiet_NaN();
  double stock_error_ = std::numeric_limits<double>::quiet_NaN();
  double error_bound_ = std::numeric_limits<double>::quiet_NaN();
  Breakdown spent_;
  bool prepared_ahead_ = false;
  bool in_knob_search_ = false;  // build/warm-up/timing seconds then count as knob_s
  std::string log_entry_;
};

void Tuner::build(const std::vector<size_t>& indices) {
  const double wall = build_plans(key_, candidates_, indices, build_threads());
  if (in_knob_search_) return;
  spent_.build_s += wall;
  for (const size_t i : indices) spent_.build_sum_s += candidates_[i].build_s;
}

bool Tuner::within_limit(const Candidate& c) const {
  const int64_t limit = workspace_limit();
  return limit < 0 || static_cast<int64_t>(c.runner->workspace_bytes) <= limit;
}

// One workspace for every timed call: the largest any runnable candidate needs.
// A size the allocator cannot supply drops the candidates needing it.
void Tuner::prepare_workspace() {
  size_t needed = 0;
  for (const auto& c : candidates_) {
    if (c.runnable()) needed = std::max(needed, c.runner->workspace_bytes);
  }
  if (needed <= workspace_bytes_) return;
  while (true) {
    try {
      workspace_ = allocate_workspace(needed);
      workspace_bytes_ = needed;
      return;
    } catch (const c10::OutOfMemoryError&) {
      for (auto& c : candidates_) {
        if (c.runnable() && c.runner->workspace_bytes >= needed) c.runner = nullptr;
      }
      needed = 0;
      for (const auto& c : candidates_) {
        if (c.runnable()) needed = std::max(needed, c.runner->workspace_bytes);
      }
      if (needed <= workspace_bytes_) return;
    }
  }
}

// Runs each candidate once (module loading, lazy initialisation) and keeps the
// ones that ran; a cuDNN error there drops the candidate.
std::vector<size_t> Tuner::warm_up(std::vector<size_t> indices) {
  const auto started = Clock::now();
  prepare_workspace();
  std::vector<size_t> ran;
  for (const size_t i : indices) {
    auto& c = candidates_[i];
    if (!c.runnable()) continue;
    const auto run_started = Clock::now();
    try {
      c.runner->run(operands_.a, operands_.b, operands_.out, workspace_.get());
      ran.push_back(i);
    } catch (const c10::Error&) {
      c.runner = nullptr;
    }
    c.warmup_ms = seconds_since(run_started) * 1e3;
  }
  c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(key_.device)).synchronize();
  if (!in_knob_search_) spent_.warmup_s += seconds_since(started);
  return ran;
}

// `reps` rounds over `indices`, each call between two CUDA events, all queued
// behind one spin kernel: GPU time only, and drift hits every candidate alike.
// The host time of each call's enqueue is taken on the way: behind the spin
// kernel no launch waits for the GPU, so it is what the call costs the CPU.
// Builds may run on other threads meanwhile (tune()): a batch the host could
// not queue within its spin is timed again (kMaxTimingAttempts); the seconds
// it then waits for the builds count as wait_s.
void Tuner::time_interleaved(const std::vector<size_t>& indices, int reps) {
  if (indices.empty()) return;
  const auto started = Clock::now();
  const auto stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(key_.device));
  const size_t calls = indices.size() * static_cast<size_t>(reps);
  std::vector<c10::Event> starts, ends;
  starts.reserve(calls);
  ends.reserve(calls);
  for (size_t k = 0; k < calls; ++k) {
    starts.emplace_back(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    ends.emplace_back(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
  }
  c10::Event spin_end(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
  std::vector<double> host_us(calls);
  // The least host µs per call seen of each candidate: earlier batches, then this one's attempts.
  std::vector<double> least_host_us(indices.size(), std::numeric_limits<double>::infinity());
  for (size_t j = 0; j < indices.size(); ++j) {
    for (const double us : candidates_[indices[j]].host_us) least_host_us[j] = std::min(least_host_us[j], us);
  }
  const double cycles_per_us = spin_cycles_per_us();
  const auto spin_for_host = [&] {
    int64_t cycles = 0;
    for (size_t j = 0; j < indices.size(); ++j) {
      const double host_cycles =
          std::isfinite(least_host_us[j]) ? kSpinPerHostTime * least_host_us[j] * cycles_per_us : 0;
      cycles += std::max(kSpinCyclesPerCall, static_cast<int64_t>(host_cycles)) * reps;
    }
    return cycles;
  };
  int64_t spin_cycles = spin_for_host();
  double waited_s = 0;
  for (int attempt = 1;; ++attempt) {
    at::cuda::sleep(spin_cycles);
    spin_end.record(stream);
    size_t k = 0;
    for (int r = 0; r < reps; ++r) {
      for (const size_t i : indices) {
        starts[k].record(stream);
        const auto enqueued = Clock::now();
        candidates_[i].runner->run(operands_.a, operands_.b, operands_.out, workspace_.get());
        host_us[k] = seconds_since(enqueued) * 1e6;
        ends[k].record(stream);
        ++k;
      }
    }
    // Still spinning once every call is queued: no timed call waited for the host.
    const bool host_kept_up = !spin_end.query();
    ends.back().synchronize();
    if (host_kept_up || attempt == kMaxTimingAttempts) break;
    ++retimed_batches_;
    for (size_t call = 0; call < calls; ++call) {  // calls go round the candidates
      auto& least = least_host_us[call % indices.size()];
      least = std::min(least, host_us[call]);
    }
    if (attempt + 1 == kMaxTimingAttempts) {
      const auto wait_started = Clock::now();
      wait_until_prepared_all();
      waited_s = seconds_since(wait_started);
    }
    spin_cycles = std::max(2 * spin_cycles, spin_for_host());
  }
  size_t k = 0;
  for (int r = 0; r < reps; ++r) {
    for (const size_t i : indices) {
      candidates_[i].samples_ms.push_back(starts[k].elapsedTime(ends[k]));
      candidates_[i].host_us.push_back(host_us[k]);
      ++k;
    }
  }
  if (!in_knob_search_) {
    spent_.wait_s += waited_s;
    spent_.timing_s += seconds_since(started) - waited_s;
  }
}

// The spin kernel counts SM clock cycles: the device's peak clock.
double Tuner::spin_cycles_per_us() const {
  int khz = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, static_cast<int>(key_.device)));
  return khz / 1000.0;
}

std::vector<size_t> Tuner::by_median(std::vector<size_t> indices) const {
  std::stable_sort(indices.begin(), indices.end(), [&](size_t l, size_t r) {
    return candidates_[l].median_ms() < candidates_[r].median_ms();
  });
  return indices;
}

std::string config_name(int64_t engine, const std::vector<std::pair<int64_t, int64_t>>& knobs) {
  std::string name = "eng" + std::to_string(engine);
  for (const auto& [id, value] : knobs) name += "_k" + std::to_string(id) + "=" + std::to_string(value);
  return name;
}

std::vector<int64_t> knob_values(const KnobRange& range) {
  std::vector<int64_t> values;
  const int64_t count = (range.max - range.min) / range.step + 1;
  const int64_t stride = std::max<int64_t>(1, (count + kMaxValuesPerKnob - 1) / kMaxValuesPerKnob);
  for (int64_t v = range.min; v <= range.max; v += range.step * stride) values.push_back(v);
  return values;
}

// Coordinate descent over the knobs of the best engines: one knob at a time,
// every value of its range (sampled when wide) built and timed against the
// current best of that engine; an improvement of kMinGain is kept. Bounded by
// kKnobSearchSeconds per configuration. Adds each engine's winner to `finalists`.
void Tuner::search_knobs(std::vector<size_t>& finalists) {
  const auto deadline = started_ + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(kKnobSearchSeconds));
  std::set<int64_t> engines;
  std::vector<size_t> seeds;
  for (const size_t i : finalists) {
    const auto engine = parse_engine_name(candidates_[i].name).engine;
    if (engines.size() < kKnobSearchEngines && engines.insert(engine).second) seeds.push_back(i);
  }
  for (size_t best : seeds) {
    const EngineName seed = parse_engine_name(candidates_[best].name);
    for (const auto& range : engine_knob_ranges(key_, seed.engine)) {
      if (Clock::now() > deadline) return;
      const EngineName current = parse_engine_name(candidates_[best].name);
      const auto slot = std::find_if(current.knobs.begin(), current.knobs.end(),
                                     [&](const auto& knob) { return knob.first == range.id; });
      if (slot == current.knobs.end()) continue;  // the name does not fix this knob
      const size_t first_new = candidates_.size();
      for (const int64_t value : knob_values(range)) {
        auto knobs = current.knobs;
        knobs[slot - current.knobs.begin()].second = value;
        const auto name = config_name(current.engine, knobs);
        if (!known_.insert(name).second) continue;
        Candidate c;
        c.name = name;
        c.rtc = candidates_[best].rtc;  // a property of the engine
        candidates_.push_back(std::move(c));
      }
      if (candidates_.size() == first_new) continue;
      build(index_range(first_new, candidates_.size()));
      std::vector<size_t> fresh;
      for (size_t i = first_new; i < candidates_.size(); ++i) {
        if (candidates_[i].runnable() && within_limit(candidates_[i])) fresh.push_back(i);
      }
      knob_configs_ += candidates_.size() - first_new;
      fresh = warm_up(fresh);
      if (fresh.empty()) continue;
      fresh.push_back(best);
      time_interleaved(fresh, kFirstRoundReps);
      const size_t winner = by_median(fresh).front();
      if (winner != best &&
          candidates_[winner].median_ms() < candidates_[best].median_ms() * (1 - kMinGain)) {
        best = winner;
      }
    }
    if (std::find(finalists.begin(), finalists.end(), best) == finalists.end()) {
      finalists.push_back(best);
    }
  }
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

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n' ? ' ' : c);
  }
  return out + "\"";
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  std::ostringstream out;
  out.precision(6);
  out << value;
  return out.str();
}

const char* dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kDouble: return "float64";
    default: return "float32";
  }
}

void Tuner::record(const Candidate* pick, size_t timed) {
  const Candidate* stock = stock_config_ ? &candidates_[*stock_config_] : nullptr;
  const double seconds = seconds_since(started_);
  std::ostringstream entry;
  entry << "{\"direction\": " << json_string(direction_name(key_.dir()))
        << ", \"conv\": " << json_string(describe_conv(key_))
        << ", \"dtype\": " << json_string(dtype_name(key_.scalar_type()))
        << ", \"deterministic\": " << (key_.deterministic ? "true" : "false")
        << ", \"pick\": " << (pick ? json_string(pick->name) : "null")
        << ", \"stock_config\": " << (stock ? json_string(stock->name) : "null")
        << ", \"pick_ms\": " << (pick ? json_number(pick->median_ms()) : "null")
        << ", \"stock_config_ms\": " << (stock ? json_number(stock->median_ms()) : "null")
        << ", \"pick_host_us\": " << (pick ? json_number(pick->median_host_us()) : "null")
        << ", \"stock_config_host_us\": " << (stock ? json_number(stock->median_host_us()) : "null")
        << ", \"candidates\": " << listed_ << ", \"timed\": " << timed
        << ", \"knob_configs\": " << knob_configs_ << ", \"retimed_batches\": " << retimed_batches_
        << ", \"seconds\": " << json_number(seconds)
        << ", \"workspace\": " << (pick ? std::to_string(pick->runner->workspace_bytes) : "null")
        << ", \"max_rel_error\": " << json_number(pick_error_)
        << ", \"stock_config_max_rel_error\": " << json_number(stock_error_)
        << ", \"max_rel_error_bound\": " << json_number(error_bound_);
  size_t built = 0, built_rtc = 0, listed_rtc = 0, deferred_rtc = 0;
  for (const auto& c : candidates_) {
    built += c.built && !c.cached;
    built_rtc += c.built && !c.cached && c.rtc;
    listed_rtc += c.rank >= 0 && c.rtc;
    deferred_rtc += c.deferred;
  }
  entry << ", \"prepared_ahead\": " << (prepared_ahead_ ? "true" : "false");
  entry << ", \"built\": " << built << ", \"built_rtc\": " << built_rtc
        << ", \"listed_rtc\": " << listed_rtc << ", \"deferred_rtc\": " << deferred_rtc;
  entry << ", \"time_s\": {\"heuristics\": " << json_number(spent_.heuristics_s)
        << ", \"build\": " << json_number(spent_.build_s)
        << ", \"build_sum\": " << json_number(spent_.build_sum_s)
        << ", \"wait\": " << json_number(spent_.wait_s)
        << ", \"operands\": " << json_number(spent_.operands_s)
        << ", \"warmup\": " << json_number(spent_.warmup_s)
        << ", \"timing\": " << json_number(spent_.timing_s)
        << ", \"accuracy\": " << json_number(spent_.accuracy_s)
        << ", \"knob_search\": " << json_number(spent_.knob_s) << "}";
  // Per configuration considered (knob-search ones included): the heuristics'
  // rank (-1: knob search), RUNTIME_COMPILATION, its build seconds (null: not
  // built), whether the runner cache already held it, host ms of its first run,
  // median GPU ms and host µs per enqueue (null: not timed).
  entry << ", \"configs\": [";
  for (size_t i = 0; i < candidates_.size(); ++i) {
    const auto& c = candidates_[i];
    entry << (i ? ", " : "") << "{\"config\": " << json_string(c.name) << ", \"rank\": " << c.rank
          << ", \"rtc\": " << (c.rtc ? "true" : "false")
          << ", \"build_s\": " << (c.built ? json_number(c.build_s) : "null")
          << ", \"cached\": " << (c.cached ? "true" : "false")
          << ", \"runnable\": " << (c.runnable() ? "true" : "false")
          << ", \"warmup_ms\": " << json_number(c.warmup_ms)
          << ", \"ms\": " << (c.samples_ms.empty() ? "null" : json_number(c.median_ms()))
          << ", \"host_us\": " << (c.host_us.empty() ? "null" : json_number(c.median_host_us())) << "}";
  }
  entry << "]}";
  log_entry_ = entry.str();
  {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    log_entries().push_back(log_entry_);
  }
  std::ostringstream line;
  line.precision(4);
  line << "fastest: " << (pick ? pick->name : "stock's own path") << " ("
       << (pick ? json_number(pick->median_ms()) : "-") << " ms) vs stock's configuration "
       << (stock ? stock->name + " (" + json_number(stock->median_ms()) + " ms)" : "none") << "; "
       << listed_ << " candidates, " << timed << " timed, "
       << knob_configs_ << " knob configurations, tuned in " << json_number(seconds) << " s | "
       << describe_conv(key_);
  log_to_python(LogLevel::kDebug, line.str());
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
  std::vector<size_t> eligible;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (candidates_[i].runnable() && within_limit(candidates_[i])) eligible.push_back(i);
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
  time_interleaved(timed, kFirstRoundReps);

  std::vector<size_t> finalists;
  for (const size_t i : by_median(timed)) {
    if (finalists.size() < kFinalists && within_limit(candidates_[i])) finalists.push_back(i);
  }
  if (knob_search_enabled()) {
    const auto knobs_started = Clock::now();
    in_knob_search_ = true;
    search_knobs(finalists);
    in_knob_search_ = false;
    spent_.knob_s += seconds_since(knobs_started);
  }
  if (stock_config_ && std::find(finalists.begin(), finalists.end(), *stock_config_) == finalists.end()) {
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
  choice->engine = pick->name;
  return choice;
}

}  // namespace

std::shared_ptr<const Choice> tune_fastest(const ConvKey& key, std::string* log_entry) {
  const c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(key.device));
  Tuner tuner(key);
  auto choice = tuner.run();
  if (log_entry != nullptr) *log_entry = tuner.log_entry();
  return choice;
}

void prepare_fastest(ConvKey key) {
  key.algo = kNoChoice;
  prepare_queue().add(key);
}

void cancel_prepared_fastest() {
  const WithoutGil unlocked;  // the builders may log to Python
  prepare_queue().cancel();
}

bool knob_search_enabled() {
  return g_knob_search.load(std::memory_order_relaxed);
}

bool exchange_knob_search(bool enabled) {
  return g_knob_search.exchange(enabled);
}

std::vector<std::string> tuning_log_entries() {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  return log_entries();
}

void clear_tuning_log() {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  log_entries().clear();
}

double tuner_tolerance(at::ScalarType dtype, bool allow_tf32) {
  switch (dtype) {
    case at::kHalf: return 1e-2;
    case at::kBFloat16: return 5e-2;
    case at::kDouble: return 1e-10;
    default: return allow_tf32 ? 1e-2 : 1e-4;
  }
}

}  // namespace torch_cudnn_algo
