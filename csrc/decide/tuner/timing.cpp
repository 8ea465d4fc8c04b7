// The tuner's timing: one workspace for every timed call, a warm-up run per
// candidate, and timed rounds of CUDA events around single calls queued behind
// a spin kernel, so the host's enqueue time never leaks into GPU time (the
// rounds' logic is interleaved_timing.h; this file gives it the GPU).
#include "decide/tuner/interleaved_timing.h"
#include "decide/tuner/tuner.h"

#include "base/cudnn_handle.h"

#include <ATen/cuda/Sleep.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

namespace torch_cudnn_algo {
namespace tuner {

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

namespace {

// The GPU side of the timed rounds: CUDA events around each call on the
// tuning's stream, the spin kernel, the build threads to wait for.
class CudaTimingDevice final : public TimingDevice {
 public:
  CudaTimingDevice(c10::cuda::CUDAStream stream, std::vector<Candidate>& candidates, const std::vector<size_t>& indices,
                   const Operands& operands, void* workspace)
      : stream_(stream), candidates_(candidates), indices_(indices), operands_(operands), workspace_(workspace) {}

  void prepare(size_t slots) override {
    starts_.clear();
    ends_.clear();
    starts_.reserve(slots);
    ends_.reserve(slots);
    for (size_t k = 0; k < slots; ++k) {
      starts_.emplace_back(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
      ends_.emplace_back(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    }
  }
  void spin(int64_t cycles) override { at::cuda::sleep(cycles); }
  double call(size_t slot, size_t candidate) override {
    starts_[slot].record(stream_);
    const auto enqueued = Clock::now();
    candidates_[indices_[candidate]].runner->run(operands_.a, operands_.b, operands_.out, workspace_);
    const double host_us = seconds_since(enqueued) * 1e6;
    ends_[slot].record(stream_);
    return host_us;
  }
  bool reached(size_t slot) override { return starts_[slot].query(); }
  void synchronize() override { ends_.back().synchronize(); }
  double elapsed_ms(size_t slot) override { return starts_[slot].elapsedTime(ends_[slot]); }
  double wait_for_builds() override {
    const auto started = Clock::now();
    wait_until_prepared_all();
    return seconds_since(started);
  }

 private:
  c10::cuda::CUDAStream stream_;
  std::vector<Candidate>& candidates_;
  const std::vector<size_t>& indices_;
  const Operands& operands_;
  void* workspace_;
  std::vector<c10::Event> starts_, ends_;
};

}  // namespace

// `reps` rounds over `indices` on the GPU (see time_interleaved_calls); the
// seconds spent waiting for builds count as wait_s.
void Tuner::time_interleaved(const std::vector<size_t>& indices, int reps) {
  if (indices.empty()) return;
  const auto started = Clock::now();
  CudaTimingDevice device(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(key_.device)), candidates_,
                          indices, operands_, workspace_.get());
  std::vector<TimedCandidate> timed;
  for (const size_t i : indices) timed.push_back({&candidates_[i].samples_ms, &candidates_[i].host_us});
  const TimedBatch batch = time_interleaved_calls(device, timed, reps, spin_cycles_per_us());
  retimed_batches_ += static_cast<size_t>(batch.retimed_attempts);
  if (!in_knob_search_) {
    spent_.wait_s += batch.waited_s;
    spent_.timing_s += seconds_since(started) - batch.waited_s;
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
