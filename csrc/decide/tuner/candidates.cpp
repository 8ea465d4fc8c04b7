// The tuner's candidates: heuristics mode A's configurations under the rules,
// in cuDNN's ranking (for grouped convolutions also mode B's and the fallback
// list's: the wide search); the first round's runners built in parallel threads
// (runtime-compiled ones beyond stock's own only up to a budget); stock's
// configuration found among them; and the queue that prepares every
// configuration of tune() ahead.
#include "decide/tuner/fastest_tuner.h"
#include "decide/tuner/tuner.h"

#include "base/python_bridge.h"
#include "base/work_queue.h"
#include "decide/plan.h"
#include "run/direct_runner.h"
#include "run/engine_enumeration.h"
#include "run/engine_name.h"
#include "run/graph_runner_source.h"

#include <c10/cuda/CUDAGuard.h>

#include <atomic>
#include <map>
#include <thread>

namespace torch_cudnn_algo {
namespace tuner {
namespace {

// Heuristics A's first entries built and timed in the first round. Stock's
// benchmark mode times ten of this list, but the fastest is nearly always among
// the first few, and the lower-ranked ones cost most of the builds and of the
// first round's GPU time (slow engines).
constexpr size_t kFirstRoundCandidates = 4;
// Grouped convolutions that are not depthwise (several channels per group) time
// ten, as stock's benchmark mode does: there the heuristics rank the fastest
// engines lower.
constexpr size_t kGroupedFirstRoundCandidates = 10;
// Runtime-compiled configurations (RUNTIME_COMPILATION note) built besides
// stock's own: building one compiles its kernel (NVRTC), orders of magnitude
// costlier than a precompiled engine's build.
constexpr int64_t kRtcCandidates = 1;

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

// `indices`' runners built with up to `threads` threads, their seconds counted in `spent`.
void build_into(const ConvKey& key, Prepared& p, const std::vector<size_t>& indices, size_t threads) {
  p.spent.build_s += build_runners(key, p.candidates, indices, threads);
  for (const size_t i : indices) p.spent.build_sum_s += p.candidates[i].build_s;
}

// Stock runs the first configuration of heuristics A that builds (mode A comes
// first in the list; fallback entries follow it). A runtime-compiled one left
// unbuilt ahead of the first that built would be stock's if it builds: it is
// built now, in list order, until stock's configuration is known.
void find_stock_config(const ConvKey& key, Prepared& p, size_t threads) {
  for (size_t i = 0; i < p.candidates.size() && !p.stock_config; ++i) {
    // Stock runs heuristics A's list, then the fallback list: never mode B's,
    // extras only behind the rest of A's, and never our own kernels.
    const Candidate& c = p.candidates[i];
    if (c.extra || c.kernel || c.source == "heuristics_b") continue;
    if (p.candidates[i].deferred) build_into(key, p, {i}, threads);
    if (p.candidates[i].runnable()) {
      p.stock_config = i;
      p.candidates[i].is_stock_config = true;
    }
  }
}

// tune() knows every configuration before it tunes the first: prepare_fastest
// queues each one's preparation (heuristics query and runner builds, no GPU
// work) to background threads, one configuration per thread, so that builds of
// different configurations overlap; a tuning then takes its configuration's
// result (waiting for it alone) and times it while the threads go on building
// the configurations after it. Runtime compilation serialises in the process
// (NVRTC holds a process-wide lock while it compiles), so the compiles are a
// chain that timing need not wait behind; compile workers in other processes
// share that chain (see compile_workers.h).
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

}  // namespace

size_t build_threads() {
  const int64_t fallback = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 8);
  return static_cast<size_t>(std::max<int64_t>(1, env_int("TORCH_CUDNN_ALGO_TUNE_THREADS", fallback)));
}

double build_runners(const ConvKey& key, std::vector<Candidate>& candidates, const std::vector<size_t>& indices,
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
        c.runner = c.kernel ? get_direct_runner(key, &created)
                            : get_graph_runner(key, c.engine, &created, plan_execution_plans(), c.rtc, c.default_knobs);
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

Prepared prepare(const ConvKey& key, size_t threads) {
  Prepared p;
  const auto started = Clock::now();
  const WideSearch wide = wide_search(key);
  const auto listing = heuristic_engine_candidates(key, /*with_mode_b=*/wide == WideSearch::kFallbackAndModeB);
  std::map<int64_t, int> entries_of_engine;
  for (const auto& listed : listing) {
    if (listed.engine) ++entries_of_engine[listed.engine->engine];
  }
  for (const auto& listed : listing) {
    if (!listed.refusal.empty()) continue;  // the determinism / TF32 rules
    // cuDNN's tags parse; one that did not is named by the error parse_engine_name raises.
    const EngineName engine = listed.engine ? *listed.engine : parse_engine_name(listed.name);
    if (!p.known.insert(engine.canonical).second) continue;
    Candidate c;
    c.engine = engine;
    c.rank = static_cast<int>(p.candidates.size());
    c.source = listed.source;
    c.builds_from_name = listed.builds_from_name;
    if (!c.builds_from_name && listed.source == std::string("fallback")) {
      // The fallback list's bare entry is the engine at cuDNN's default knobs,
      // and what the bare name means when no other entry lists the engine.
      c.default_knobs = c.builds_from_name = entries_of_engine[engine.engine] == 1;
    }
    c.rtc = std::find(listed.behavior_notes.begin(), listed.behavior_notes.end(),
                      "RUNTIME_COMPILATION") != listed.behavior_notes.end();
    p.candidates.push_back(std::move(c));
  }
  p.spent.heuristics_s = seconds_since(started);
  p.listed = p.candidates.size();
  // Heuristics A's ranking decides what the first round times; the rest of the
  // list (lower-ranked A entries, fallback) is built only if the first ones fail.
  // A wide search adds the configurations of the fallback list (and mode B)
  // that are still worth a probe (extras).
  const size_t round = first_round_candidates(key);
  const size_t considered = std::min(round, p.candidates.size());
  const int64_t rtc_budget = rtc_candidates();
  // Runtime-compiled entries of A's first round beyond stock's (the first) take
  // the compile budget first; extras get what is left, in list order.
  int64_t rtc_left = rtc_budget;
  for (size_t i = 1; i < considered; ++i) rtc_left -= p.candidates[i].rtc;
  std::vector<Candidate> first, rest;
  for (size_t i = 0; i < p.candidates.size(); ++i) {
    Candidate& c = p.candidates[i];
    // Extras build from their name: a heuristics query per extra (serialised
    // in the process when it includes mode B) would cost more than the probes.
    // A runtime-compiled one is an extra only within the compile budget (the
    // whole-list run that found eng70/eng71 winning built one runtime-compiled
    // configuration per convolution the same way).
    const bool compile_allowed = !c.rtc || rtc_budget < 0 || rtc_left > 0;
    if (i >= considered && wide != WideSearch::kOff && c.source != "heuristics_a" && compile_allowed &&
        c.builds_from_name && worth_probing(key, c.engine)) {
      c.extra = true;
      rtc_left -= c.rtc;
      first.push_back(std::move(c));
    } else {
      (i < considered ? first : rest).push_back(std::move(c));
    }
  }
  p.candidates = std::move(first);
  // Precompiled configurations are cheap to build; runtime-compiled ones are
  // not: the first entry (stock's configuration, unless it fails to build) and
  // the best-ranked others up to the budget. The rest are deferred.
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
  // Our own kernels, where this build has them: timed beside cuDNN's under the
  // same rules (a refusing runner is simply not a candidate).
  if (own_kernels_built()) {
    Candidate c;
    c.rank = static_cast<int>(p.listed);
    c.source = "kernel";
    c.kernel = true;
    first_builds.push_back(p.candidates.size());
    p.candidates.push_back(std::move(c));
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

void wait_until_prepared_all() {
  const WithoutGil unlocked;  // the builders may log to Python
  prepare_queue().wait_idle();
}

std::optional<Prepared> take_prepared(const ConvKey& key) {
  const WithoutGil unlocked;  // the builders may log to Python
  return prepare_queue().take(key, PrepareQueue::IfQueued::kWait);
}

}  // namespace tuner


void prepare_fastest(ConvKey key) {
  key.algo = kNoChoice;
  tuner::prepare_queue().add(key);
}

void cancel_prepared_fastest() {
  const WithoutGil unlocked;  // the builders may log to Python
  tuner::prepare_queue().cancel();
}

}  // namespace torch_cudnn_algo
