// The tuner's timed rounds, apart from CUDA: the calls of a batch interleaved
// behind one spin, which of them the GPU timed cleanly, and the late ones timed
// again. timing.cpp runs it on the GPU (CUDA events, the spin kernel);
// tests/cpp/interleaved_timing_test.cpp on a simulated GPU timeline. Needs
// neither torch nor CUDA.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace torch_cudnn_algo {
namespace tuner {

// What timing needs of the device. A slot is one timed call of an attempt.
class TimingDevice {
 public:
  virtual ~TimingDevice() = default;
  // Makes room for `slots` calls (the events around each).
  virtual void prepare(size_t slots) = 0;
  // Queues a kernel that keeps the GPU busy for `cycles` SM clock cycles.
  virtual void spin(int64_t cycles) = 0;
  // Queues candidate `candidate`'s call in slot `slot`, between its start and
  // end events; returns the host µs the call's enqueue took.
  virtual double call(size_t slot, size_t candidate) = 0;
  // Whether the GPU has reached slot `slot`'s start event by now.
  virtual bool reached(size_t slot) = 0;
  // Waits for every queued call.
  virtual void synchronize() = 0;
  // GPU ms between slot `slot`'s start and end events, once synchronised.
  virtual double elapsed_ms(size_t slot) = 0;
  // Waits until no build holds up the host; returns the seconds it waited.
  virtual double wait_for_builds() = 0;
};

// Spin ahead of a timed batch, per call: more than the host needs to enqueue
// one call and its two events, so the GPU never waits for the host.
constexpr int64_t kSpinCyclesPerCall = 80'000;  // some tens of microseconds
// Calls the GPU caught up with are timed again, at most this many attempts in
// all. Some engines take milliseconds of host time per call (grouped layers
// launching per group), so each call's share of the spin is at least
// kSpinPerHostTime times the least host time its candidate took so far; and
// the host is held up by builds on other threads (runtime compilation), so the
// last attempt doubles the spin.
constexpr int kMaxTimingAttempts = 3;
constexpr double kSpinPerHostTime = 1.5;

// One candidate of a batch: the host µs its earlier calls took (for the spin),
// and where its samples go (GPU ms and host µs per call, appended).
struct TimedCandidate {
  std::vector<double>* samples_ms;
  std::vector<double>* host_us;
};

struct TimedBatch {
  int retimed_attempts = 0;  // attempts beyond the first
  double waited_s = 0;       // waiting for the builds before the last attempt
};

// `reps` rounds over `candidates`, each call between two events, all queued
// behind one spin: GPU time only, and drift hits every candidate alike. The
// host time of each call's enqueue is taken on the way: behind the spin no
// launch waits for the GPU, so it is what the call costs the CPU. A call is
// timed cleanly when the GPU has not reached its start event by the time the
// host has queued the whole call: the span then holds GPU work only. A call the
// GPU caught up with may hold the host's enqueue time, so it is timed again,
// alone with the others that were, behind a spin of kSpinPerHostTime times the
// least host time their candidates took, twice that on the last attempt, which
// first waits until no build runs. The last attempt's calls are kept whether
// clean or not.
inline TimedBatch time_interleaved_calls(TimingDevice& device, const std::vector<TimedCandidate>& candidates,
                                         int reps, double cycles_per_us) {
  TimedBatch batch;
  if (candidates.empty() || reps <= 0) return batch;
  std::vector<double> least_host_us(candidates.size(), std::numeric_limits<double>::infinity());
  for (size_t j = 0; j < candidates.size(); ++j) {
    for (const double us : *candidates[j].host_us) least_host_us[j] = std::min(least_host_us[j], us);
  }
  std::vector<int> owed(candidates.size(), reps);  // samples still to take, per candidate
  for (int attempt = 1;; ++attempt) {
    // The calls still owed, round after round over the candidates.
    std::vector<size_t> calls;
    for (int round = 0; round < reps; ++round) {
      for (size_t j = 0; j < candidates.size(); ++j) {
        if (owed[j] > round) calls.push_back(j);
      }
    }
    int64_t spin_cycles = 0;
    for (const size_t j : calls) {
      const double host_cycles =
          std::isfinite(least_host_us[j]) ? kSpinPerHostTime * least_host_us[j] * cycles_per_us : 0;
      spin_cycles += std::max(kSpinCyclesPerCall, static_cast<int64_t>(host_cycles));
    }
    const bool last = attempt == kMaxTimingAttempts;
    if (last) spin_cycles *= 2;  // the host fell behind even so: builds hold it up
    device.prepare(calls.size());
    std::vector<double> host_us(calls.size());
    std::vector<char> clean(calls.size());
    device.spin(spin_cycles);
    for (size_t k = 0; k < calls.size(); ++k) {
      host_us[k] = device.call(k, calls[k]);
      clean[k] = !device.reached(k);  // the GPU had not begun the call once it was all queued
    }
    device.synchronize();
    bool all_clean = true;
    for (size_t k = 0; k < calls.size(); ++k) {
      const size_t j = calls[k];
      least_host_us[j] = std::min(least_host_us[j], host_us[k]);
      if (!clean[k] && !last) {
        all_clean = false;
        continue;
      }
      candidates[j].samples_ms->push_back(device.elapsed_ms(k));
      candidates[j].host_us->push_back(host_us[k]);
      --owed[j];
    }
    if (all_clean) return batch;
    ++batch.retimed_attempts;
    if (attempt + 1 == kMaxTimingAttempts) batch.waited_s = device.wait_for_builds();
  }
}

// Which of a first round's probes (one call's GPU ms each) are near the best:
// at most `factor` times the least of them.
inline std::vector<bool> near_best(const std::vector<double>& probe_ms, double factor) {
  double best = std::numeric_limits<double>::infinity();
  for (const double ms : probe_ms) best = std::min(best, ms);
  std::vector<bool> near(probe_ms.size());
  for (size_t i = 0; i < probe_ms.size(); ++i) near[i] = probe_ms[i] <= factor * best;
  return near;
}

}  // namespace tuner
}  // namespace torch_cudnn_algo
