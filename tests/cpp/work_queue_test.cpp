// CPU checks of csrc/base/work_queue.h, compiled and run by tests/test_cpp_checks.py.
// Each check prints its name; a failed CHECK prints where and exits 1.
#include "base/work_queue.h"
#include "check.h"

#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

using torch_cudnn_algo::WorkQueue;
using Queue = WorkQueue<int, int>;
using namespace std::chrono_literals;

// A gate a job can wait at until the test opens it.
struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = false;
  std::atomic<int> waiting{0};
  void pass() {
    std::unique_lock<std::mutex> lock(mutex);
    ++waiting;
    changed.wait(lock, [&] { return open; });
  }
  void open_it() {
    std::lock_guard<std::mutex> lock(mutex);
    open = true;
    changed.notify_all();
  }
  void until_waiting(int n) {
    while (waiting.load() < n) std::this_thread::sleep_for(1ms);
  }
};

void results_are_handed_out_once_and_unknown_keys_give_nothing() {
  std::puts("results_are_handed_out_once_and_unknown_keys_give_nothing");
  Queue queue([](const int& k) { return std::optional<int>(k * k); }, 3);
  for (int k = 0; k < 20; ++k) queue.add(k);
  for (int k = 0; k < 20; ++k) CHECK(queue.take(k, Queue::IfQueued::kWait) == k * k);
  CHECK(!queue.take(3, Queue::IfQueued::kWait));  // taken already
  CHECK(!queue.take(99, Queue::IfQueued::kWait));  // never added
  queue.wait_idle();
}

void at_most_max_threads_run_at_once() {
  std::puts("at_most_max_threads_run_at_once");
  std::atomic<int> running{0}, most{0};
  Queue queue([&](const int& k) {
    const int now = ++running;
    for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {}
    std::this_thread::sleep_for(2ms);
    --running;
    return std::optional<int>(k);
  }, 2);
  for (int k = 0; k < 12; ++k) queue.add(k);
  queue.wait_idle();
  CHECK(most.load() == 2);
  for (int k = 0; k < 12; ++k) CHECK(queue.take(k, Queue::IfQueued::kWait) == k);
}

void a_queued_job_is_taken_back_and_a_running_one_waited_for() {
  std::puts("a_queued_job_is_taken_back_and_a_running_one_waited_for");
  Gate gate;
  std::atomic<int> ran_1{0};
  Queue queue([&](const int& k) {
    if (k == 0) gate.pass();
    if (k == 1) ++ran_1;
    return std::optional<int>(k + 100);
  }, 1);
  queue.add(0);
  queue.add(1);
  gate.until_waiting(1);  // the one worker runs 0; 1 is queued behind it
  CHECK(!queue.take(1, Queue::IfQueued::kTakeBack));
  std::thread opener([&] {
    std::this_thread::sleep_for(20ms);
    gate.open_it();
  });
  CHECK(queue.take(0, Queue::IfQueued::kTakeBack) == 100);  // running: waits for it
  opener.join();
  queue.wait_idle();
  CHECK(ran_1.load() == 0);
}

void a_failed_job_gives_nothing() {
  std::puts("a_failed_job_gives_nothing");
  Queue queue([](const int& k) { return k % 2 ? std::optional<int>(k) : std::nullopt; }, 2);
  queue.add(1);
  queue.add(2);
  CHECK(queue.take(1, Queue::IfQueued::kWait) == 1);
  CHECK(!queue.take(2, Queue::IfQueued::kWait));
}

void cancel_wakes_waiters_drops_results_and_keeps_the_queue_usable() {
  std::puts("cancel_wakes_waiters_drops_results_and_keeps_the_queue_usable");
  Gate gate;
  Queue queue([&](const int& k) {
    if (k == 0) gate.pass();
    return std::optional<int>(k);
  }, 1);
  queue.add(0);
  queue.add(1);
  gate.until_waiting(1);
  std::optional<int> waited = 5;
  std::thread waiter([&] { waited = queue.take(1, Queue::IfQueued::kWait); });  // 1 is queued
  std::this_thread::sleep_for(20ms);
  std::thread opener([&] {
    std::this_thread::sleep_for(20ms);
    gate.open_it();
  });
  queue.cancel();  // drops 1 (its waiter gets nothing), waits for 0, drops 0's result
  waiter.join();
  opener.join();
  CHECK(!waited);
  CHECK(!queue.take(0, Queue::IfQueued::kWait));
  queue.add(7);
  CHECK(queue.take(7, Queue::IfQueued::kWait) == 7);
}

void nothing_is_added_after_stop() {
  std::puts("nothing_is_added_after_stop");
  std::atomic<int> runs{0};
  Queue queue([&](const int& k) {
    ++runs;
    return std::optional<int>(k);
  }, 2);
  queue.stop();
  queue.add(1);
  CHECK(!queue.take(1, Queue::IfQueued::kWait));
  CHECK(runs.load() == 0);
}

void zero_threads_runs_nothing() {
  std::puts("zero_threads_runs_nothing");
  Queue queue([](const int& k) { return std::optional<int>(k); }, 0);
  queue.add(1);
  CHECK(!queue.take(1, Queue::IfQueued::kWait));  // the caller does the work
}

void stop_in_a_forked_child_returns_at_once() {
  std::puts("stop_in_a_forked_child_returns_at_once");
  Gate gate;
  Queue queue([&](const int& k) {
    gate.pass();
    return std::optional<int>(k);
  }, 1);
  queue.add(0);
  gate.until_waiting(1);  // a worker is running: joining it in the child would hang
  const pid_t child = fork();
  if (child == 0) {
    queue.stop();
    _exit(0);
  }
  int status = -1;
  bool exited = false;
  for (int i = 0; i < 500 && !exited; ++i) {  // 5 s
    exited = waitpid(child, &status, WNOHANG) == child;
    if (!exited) std::this_thread::sleep_for(10ms);
  }
  if (!exited) kill(child, SIGKILL), waitpid(child, &status, 0);
  gate.open_it();
  CHECK(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(queue.take(0, Queue::IfQueued::kWait) == 0);
}

int main() {
  results_are_handed_out_once_and_unknown_keys_give_nothing();
  at_most_max_threads_run_at_once();
  a_queued_job_is_taken_back_and_a_running_one_waited_for();
  a_failed_job_gives_nothing();
  cancel_wakes_waiters_drops_results_and_keeps_the_queue_usable();
  nothing_is_added_after_stop();
  zero_threads_runs_nothing();
  stop_in_a_forked_child_returns_at_once();
  std::puts("ALL PASSED");
  return 0;
}
