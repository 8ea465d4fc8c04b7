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
// A batch whose spin ran out before the host had queued every call may have
// timed the GPU waiting for the host: it is timed again; if the host falls
// behind again, the batch waits until no build runs in the process and is
// timed a last time. Some engines take milliseconds of host time per call
// (grouped layers launching per group), so each call's share of the spin is at
// least kSpinPerHostTime times the least host time its candidate took so far;
// and the host is held up by builds on other threads (runtime compilation), so
// each attempt at least doubles the spin.
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

}  // namespace tuner
}  // namespace torch_cudnn_algo
