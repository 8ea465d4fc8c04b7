// CPU checks of csrc/decide/tuner/interleaved_timing.h, compiled and run by
// tests/test_cpp_checks.py, on a simulated device: one host clock and
// one in-order GPU queue, in µs. Each check prints its name; a failed CHECK
// prints where and exits 1.
#include "decide/tuner/interleaved_timing.h"
#include "check.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace torch_cudnn_algo::tuner;

constexpr double kCyclesPerUs = 1000;  // a 1 GHz SM clock

// A candidate as the simulated device runs it: GPU µs per call, and host µs to
// enqueue one, by attempt while builds run (the last repeated), and once they
// are done.
struct SimCandidate {
  double gpu_us;
  std::vector<double> host_us_by_attempt;
  double host_us_after_builds;
};

// The host queues work on an in-order GPU: an event or kernel starts once the
// host has queued it and the GPU is done with what came before.
class SimDevice final : public TimingDevice {
 public:
  explicit SimDevice(std::vector<SimCandidate> candidates) : candidates_(std::move(candidates)) {}

  void prepare(size_t slots) override {
    start_us_.assign(slots, 0);
    end_us_.assign(slots, 0);
    ++attempts;
    calls.push_back(static_cast<int64_t>(slots));
  }
  void spin(int64_t cycles) override {
    spins.push_back(cycles);
    gpu_free_us_ = std::max(gpu_free_us_, host_us_) + cycles / kCyclesPerUs;
  }
  double call(size_t slot, size_t candidate) override {
    const SimCandidate& c = candidates_[candidate];
    start_us_[slot] = std::max(gpu_free_us_, host_us_);  // the start event
    const auto& by_attempt = c.host_us_by_attempt;
    const double host = builds_done_ ? c.host_us_after_builds
                                     : by_attempt[std::min<size_t>(attempts - 1, by_attempt.size() - 1)];
    host_us_ += host;  // the launch reaches the GPU once the host has queued it
    const double kernel_start = std::max(start_us_[slot], host_us_);
    end_us_[slot] = gpu_free_us_ = kernel_start + c.gpu_us;
    host_us_ += 1;  // the end event
    return host;
  }
  bool reached(size_t slot) override { return start_us_[slot] <= host_us_; }
  void synchronize() override { host_us_ = std::max(host_us_, gpu_free_us_); }
  double elapsed_ms(size_t slot) override { return (end_us_[slot] - start_us_[slot]) / 1e3; }
  double wait_for_builds() override {
    builds_done_ = true;
    return 0.25;
  }

  int attempts = 0;
  std::vector<int64_t> calls, spins;  // per attempt

 private:
  std::vector<SimCandidate> candidates_;
  std::vector<double> start_us_, end_us_;
  double host_us_ = 0, gpu_free_us_ = 0;
  bool builds_done_ = false;
};

struct Samples {
  std::vector<std::vector<double>> ms, host;
  std::vector<TimedCandidate> timed;
  explicit Samples(size_t n) : ms(n), host(n) {
    for (size_t j = 0; j < n; ++j) timed.push_back({&ms[j], &host[j]});
  }
};

bool near(double a, double b) { return std::fabs(a - b) <= 1e-9 + 1e-9 * std::fabs(b); }

// Calls the host keeps up with: one attempt, every sample exactly the GPU time.
void host_keeping_up_times_once() {
  std::puts("host_keeping_up_times_once");
  SimDevice device({{50, {10}, 10}, {120, {20}, 20}, {30, {5}, 5}});
  Samples s(3);
  const TimedBatch batch = time_interleaved_calls(device, s.timed, 3, kCyclesPerUs);
  CHECK(batch.retimed_attempts == 0 && batch.waited_s == 0 && device.attempts == 1);
  CHECK(device.spins.size() == 1 && device.spins[0] == 9 * kSpinCyclesPerCall);
  const double gpu[] = {50, 120, 30}, host[] = {10, 20, 5};
  for (size_t j = 0; j < 3; ++j) {
    CHECK(s.ms[j].size() == 3 && s.host[j].size() == 3);
    for (size_t r = 0; r < 3; ++r) CHECK(near(s.ms[j][r], gpu[j] / 1e3) && s.host[j][r] == host[j]);
  }
}

// One candidate taking milliseconds of host time a call (launching per group)
// outruns the spin: only the calls the GPU caught up with run again, behind a
// spin of 1.5x their candidates' host time, and every kept sample is GPU time
// alone.
void late_calls_alone_are_timed_again() {
  std::puts("late_calls_alone_are_timed_again");
  SimDevice device({{40, {10}, 10}, {11800, {22000}, 22000}, {37, {76}, 76}, {60, {10}, 10}});
  Samples s(4);
  const TimedBatch batch = time_interleaved_calls(device, s.timed, 1, kCyclesPerUs);
  CHECK(batch.retimed_attempts == 1 && batch.waited_s == 0 && device.attempts == 2);
  // The first attempt queues 4 calls behind the spin; the slow one's enqueue outlasts it, so the
  // GPU reaches its start event before its kernel: it alone runs again (the GPU, busy with its
  // 11.8 ms, had not reached the calls after it), behind 1.5x its host time.
  CHECK(device.spins[0] == 4 * kSpinCyclesPerCall);
  CHECK(device.spins[1] == static_cast<int64_t>(1.5 * 22000 * kCyclesPerUs));
  const double gpu[] = {40, 11800, 37, 60};
  for (size_t j = 0; j < 4; ++j) CHECK(s.ms[j].size() == 1 && near(s.ms[j][0], gpu[j] / 1e3));
}

// A host held up by builds (its calls slower than anything seen before) falls
// behind twice: the last attempt waits for the builds, doubles the spin and
// keeps its calls.
void builds_holding_the_host_up_are_waited_for() {
  std::puts("builds_holding_the_host_up_are_waited_for");
  // Slower than the GPU on every call while builds run, slower still on the second attempt; fast
  // once they are done.
  SimDevice device({{20, {400, 1000}, 10}, {20, {400, 1000}, 10}});
  Samples s(2);
  // Earlier batches saw the fast host times, so the spin is sized for them.
  s.host[0] = {10};
  s.host[1] = {10};
  const TimedBatch batch = time_interleaved_calls(device, s.timed, 3, kCyclesPerUs);
  CHECK(batch.retimed_attempts == 2 && near(batch.waited_s, 0.25) && device.attempts == 3);
  // The spin is sized by the least host time seen (10 µs, under the floor per call), so the second
  // attempt falls behind too; the last one doubles it.
  CHECK(device.calls[0] == 6 && device.calls[1] < 6 && device.calls[2] <= device.calls[1]);
  CHECK(device.spins[1] == device.calls[1] * kSpinCyclesPerCall);
  CHECK(device.spins[2] == 2 * device.calls[2] * kSpinCyclesPerCall);
  for (size_t j = 0; j < 2; ++j) {
    CHECK(s.ms[j].size() == 3 && s.host[j].size() == 4);  // host: the earlier batch's and this one's 3
    for (size_t r = 0; r < 3; ++r) CHECK(near(s.ms[j][r], 0.02));
  }
}

// No candidates or no rounds: nothing queued.
void empty_batches_queue_nothing() {
  std::puts("empty_batches_queue_nothing");
  SimDevice device({{1, {1}, 1}});
  Samples none(0), one(1);
  CHECK(time_interleaved_calls(device, none.timed, 3, kCyclesPerUs).retimed_attempts == 0);
  CHECK(time_interleaved_calls(device, one.timed, 0, kCyclesPerUs).retimed_attempts == 0);
  CHECK(device.attempts == 0 && device.spins.empty() && one.ms[0].empty());
}

// The probe rule: within the factor of the least probe, ties included.
void near_best_keeps_the_probes_within_the_factor() {
  std::puts("near_best_keeps_the_probes_within_the_factor");
  const std::vector<bool> flags = near_best({0.25, 11.8, 0.375, 0.376, 0.74}, 1.5);
  CHECK(flags == std::vector<bool>({true, false, true, false, false}));
  CHECK(near_best({}, 1.5).empty());
  CHECK(near_best({2.0}, 1.5) == std::vector<bool>({true}));
}

int main() {
  host_keeping_up_times_once();
  late_calls_alone_are_timed_again();
  builds_holding_the_host_up_are_waited_for();
  empty_batches_queue_nothing();
  near_best_keeps_the_probes_within_the_factor();
  std::puts("ALL PASSED");
  return 0;
}
