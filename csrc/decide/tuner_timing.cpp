// The tuner's timing: one workspace for every timed call, a warm-up run per
// candidate, and timed rounds of CUDA events around single calls queued behind
// a spin kernel, so the host's enqueue time never leaks into GPU time.
#include "decide/tuner.h"

#include "base/cudnn_handle.h"

#include <ATen/cuda/Sleep.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>

namespace torch_cudnn_algo {
namespace tuner {
namespace {

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

}  // namespace

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
// A call is timed cleanly when the GPU has not reached its start event by the
// time the host has queued the whole call: the span then holds GPU work only.
// A call the GPU caught up with may hold the host's enqueue time, so it is
// timed again, alone with the others that were, behind a spin of 1.5x the
// least host time their candidates took, twice that on the last attempt
// (kMaxTimingAttempts), which first waits until no build runs in the process
// (tune()'s builds on other threads hold the host up; its seconds count as
// wait_s). The last attempt's calls are kept whether clean or not.
void Tuner::time_interleaved(const std::vector<size_t>& indices, int reps) {
  if (indices.empty()) return;
  const auto started = Clock::now();
  const auto stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(key_.device));
  // The least host µs per call seen of each candidate: earlier batches, then this one's attempts.
  std::vector<double> least_host_us(indices.size(), std::numeric_limits<double>::infinity());
  for (size_t j = 0; j < indices.size(); ++j) {
    for (const double us : candidates_[indices[j]].host_us) least_host_us[j] = std::min(least_host_us[j], us);
  }
  const double cycles_per_us = spin_cycles_per_us();
  std::vector<int> owed(indices.size(), reps);  // clean samples still to take, per candidate
  double waited_s = 0;
  for (int attempt = 1;; ++attempt) {
    // The calls still owed, round after round over the candidates: positions in indices.
    std::vector<size_t> calls;
    for (int round = 0; round < reps; ++round) {
      for (size_t j = 0; j < indices.size(); ++j) {
        if (owed[j] > round) calls.push_back(j);
      }
    }
    int64_t spin_cycles = 0;
    for (const size_t j : calls) {
      const double host_cycles =
          std::isfinite(least_host_us[j]) ? kSpinPerHostTime * least_host_us[j] * cycles_per_us : 0;
      spin_cycles += std::max(kSpinCyclesPerCall, static_cast<int64_t>(host_cycles));
    }
    if (attempt > 2) spin_cycles *= 2;  // the host fell behind even so: builds hold it up
    std::vector<c10::Event> starts, ends;
    starts.reserve(calls.size());
    ends.reserve(calls.size());
    for (size_t k = 0; k < calls.size(); ++k) {
      starts.emplace_back(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
      ends.emplace_back(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    }
    std::vector<double> host_us(calls.size());
    std::vector<char> clean(calls.size());
    at::cuda::sleep(spin_cycles);
    for (size_t k = 0; k < calls.size(); ++k) {
      starts[k].record(stream);
      const auto enqueued = Clock::now();
      candidates_[indices[calls[k]]].runner->run(operands_.a, operands_.b, operands_.out, workspace_.get());
      host_us[k] = seconds_since(enqueued) * 1e6;
      ends[k].record(stream);
      clean[k] = !starts[k].query();  // the GPU had not begun the call once it was all queued
    }
    ends.back().synchronize();
    const bool last = attempt == kMaxTimingAttempts;
    bool all_clean = true;
    for (size_t k = 0; k < calls.size(); ++k) {
      const size_t j = calls[k];
      least_host_us[j] = std::min(least_host_us[j], host_us[k]);
      if (!clean[k] && !last) {
        all_clean = false;
        continue;
      }
      auto& c = candidates_[indices[j]];
      c.samples_ms.push_back(starts[k].elapsedTime(ends[k]));
      c.host_us.push_back(host_us[k]);
      --owed[j];
    }
    if (all_clean) break;
    ++retimed_batches_;
    if (attempt + 1 == kMaxTimingAttempts) {
      const auto wait_started = Clock::now();
      wait_until_prepared_all();
      waited_s = seconds_since(wait_started);
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

}  // namespace tuner
}  // namespace torch_cudnn_algo
