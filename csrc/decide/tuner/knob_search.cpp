// conv_knob_search: coordinate descent over the knobs of the best engines,
// within a time budget per configuration.
#include "decide/tuner/fastest_tuner.h"
#include "decide/tuner/tuner.h"

#include "run/engine_enumeration.h"
#include "run/engine_name.h"

#include <atomic>

namespace torch_cudnn_algo {
namespace tuner {
namespace {
// conv_knob_search: engines searched and the time allowed per configuration.
constexpr size_t kKnobSearchEngines = 2;
constexpr double kKnobSearchSeconds = 1.0;
// Values tried per knob: a knob with a wider range is sampled evenly.
constexpr int64_t kMaxValuesPerKnob = 12;

std::atomic<bool> g_knob_search{false};

std::vector<int64_t> knob_values(const KnobRange& range) {
  std::vector<int64_t> values;
  const int64_t count = (range.max - range.min) / range.step + 1;
  const int64_t stride = std::max<int64_t>(1, (count + kMaxValuesPerKnob - 1) / kMaxValuesPerKnob);
  for (int64_t v = range.min; v <= range.max; v += range.step * stride) values.push_back(v);
  return values;
}

}  // namespace

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
    if (candidates_[i].kernel) continue;  // our kernel has no knobs
    const int64_t engine = candidates_[i].engine.engine;
    if (engines.size() < kKnobSearchEngines && engines.insert(engine).second) seeds.push_back(i);
  }
  for (size_t best : seeds) {
    const int64_t seed = candidates_[best].engine.engine;
    for (const auto& range : engine_knob_ranges(key_, seed)) {
      if (Clock::now() > deadline) return;
      const EngineName current = candidates_[best].engine;
      const auto slot = std::find_if(current.knobs.begin(), current.knobs.end(),
                                     [&](const auto& knob) { return knob.first == range.id; });
      if (slot == current.knobs.end()) continue;  // the name does not fix this knob
      const size_t first_new = candidates_.size();
      for (const int64_t value : knob_values(range)) {
        auto knobs = current.knobs;
        knobs[slot - current.knobs.begin()].second = value;
        EngineName configuration = engine_configuration(current.engine, std::move(knobs));
        if (!known_.insert(configuration.canonical).second) continue;
        Candidate c;
        c.engine = std::move(configuration);
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

}  // namespace tuner


bool knob_search_enabled() {
  return tuner::g_knob_search.load(std::memory_order_relaxed);
}

bool exchange_knob_search(bool enabled) {
  return tuner::g_knob_search.exchange(enabled);
}

}  // namespace torch_cudnn_algo
