// The wide search for grouped convolutions: besides heuristics A's first
// configurations, the tuner probes what cuDNN's fallback list (and, asked for,
// heuristics mode B) offers. On grouped convolutions with several channels per
// group heuristics A leaves cuDNN's fastest engines out: on an H100 (cuDNN
// 9.19) the fallback list's eng71 runs RegNetY's grouped forward convolutions
// 1.6-5x faster than A's best, eng70 its filter gradients 1.4x; stock's
// benchmark mode misses them too. On depthwise ones only mode B adds engines
// that win (eng61, a 5x5 filter gradient 11x faster), and its query costs tens
// of milliseconds a configuration, serialised in the process by the cuDNN
// frontend: hence opt-in (TORCH_CUDNN_ALGO_TUNE_WIDE=2). The lists also hold
// engines 50-500x slower than the best, so every extra configuration is first
// run once (a probe) and timed further only when that run is near the best of
// A's; and an engine whose probes were never near the best on this process's
// earlier convolutions of the same kind (direction, depthwise or grouped,
// dtype) is not probed again.
#include "decide/tuner/fastest_tuner.h"
#include "decide/tuner/tuner.h"

#include "base/common.h"
#include "run/engine_name.h"

#include <map>
#include <mutex>
#include <tuple>

namespace torch_cudnn_algo {
namespace tuner {
namespace {

// Probes an engine may lose (never near the best) before it is no longer
// probed on convolutions of the same kind.
constexpr int kProbesBeforeSkipping = 2;

// Convolutions of one kind: an engine's speed relative to the best carries
// over between them far better than between kinds.
using Kind = std::tuple<int, bool, int>;  // direction, depthwise, dtype

struct ProbeRecord {
  int probes = 0;
  int near_best = 0;
};

struct Records {
  std::mutex mutex;
  // An engine's record is kept under the engine, whatever its knobs (mode B
  // lists one engine with several knob settings).
  std::map<Kind, std::map<int64_t, ProbeRecord>> by_kind;
};

Records& records() {
  static auto* r = new Records();  // leaked, like the caches: used by the tuner's threads until exit
  return *r;
}

Kind kind_of(const ConvKey& key) {
  const bool depthwise = key.groups == key.input_sizes[1];
  return {static_cast<int>(key.dir()), depthwise, static_cast<int>(key.scalar_type())};
}

}  // namespace

WideSearch wide_search(const ConvKey& key) {
  if (key.groups <= 1) return WideSearch::kOff;
  const int64_t level = env_int("TORCH_CUDNN_ALGO_TUNE_WIDE", 1);
  if (level <= 0) return WideSearch::kOff;
  if (level >= 2) return WideSearch::kFallbackAndModeB;
  const bool depthwise = key.groups == key.input_sizes[1];
  return depthwise ? WideSearch::kOff : WideSearch::kFallback;
}

bool worth_probing(const ConvKey& key, const EngineName& configuration) {
  auto& r = records();
  const std::lock_guard<std::mutex> lock(r.mutex);
  const auto kind = r.by_kind.find(kind_of(key));
  if (kind == r.by_kind.end()) return true;
  const auto record = kind->second.find(configuration.engine);
  if (record == kind->second.end()) return true;
  return record->second.near_best > 0 || record->second.probes < kProbesBeforeSkipping;
}

void note_probe(const ConvKey& key, const EngineName& configuration, bool near_best) {
  auto& r = records();
  const std::lock_guard<std::mutex> lock(r.mutex);
  ProbeRecord& record = r.by_kind[kind_of(key)][configuration.engine];
  ++record.probes;
  record.near_best += near_best;
}

}  // namespace tuner

void clear_wide_search_record() {
  auto& r = tuner::records();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.by_kind.clear();
}

}  // namespace torch_cudnn_algo
