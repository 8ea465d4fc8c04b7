#include "decide/profiling.h"

#include "base/python_bridge.h"
#include "decide/kept_decisions.h"

#include <c10/cuda/CUDAGraphsC10Utils.h>

#include <mutex>
#include <unordered_map>

namespace torch_cudnn_algo {
namespace {

struct Decision {
  bool done = false;                    // false while a thread is profiling it
  std::shared_ptr<const Choice> choice;  // nullptr: the stock path
};

std::mutex g_mutex;

// Leaked: decisions hold no cuDNN objects, but a static destructor could run
// while the autograd thread still reads the map at exit.
std::unordered_map<ConvKey, Decision, ConvKeyHash>& decisions() {
  static auto* map = new std::unordered_map<ConvKey, Decision, ConvKeyHash>();
  return *map;
}

bool capturing() {
  return c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
}

void record(const ConvKey& key, std::shared_ptr<const Choice> choice) {
  std::lock_guard<std::mutex> lock(g_mutex);
  decisions()[key] = Decision{true, std::move(choice)};
}

// The "fastest" decision (kept in the tuning database, else borrowed from a
// nearby size, else tuned); a tuner failure is one warning and the stock path.
std::shared_ptr<const Choice> tuned_or_stock(const ConvKey& key) {
  try {
    return decide_fastest(key, /*retune=*/false, /*entry=*/nullptr, /*borrow=*/true);
  } catch (const c10::Error& error) {
    warn_to_python(std::string("torch_cudnn_algo: tuning failed (") + error.what_without_backtrace() +
                   "); running PyTorch's own choice for this configuration: " + describe_conv(key));
    return nullptr;
  }
}

}  // namespace

std::shared_ptr<const Choice> profiled_choice(ConvKey key, bool* settled) {
  key.algo = kNoChoice;
  *settled = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    const auto it = decisions().find(key);
    if (it != decisions().end()) {
      *settled = it->second.done;
      return it->second.choice;  // nullptr while another thread profiles it
    }
    // Never time anything while a CUDA graph is being captured: the kernels
    // would be recorded, not run. Profiled later, outside capture.
    if (capturing()) {
      return nullptr;
    }
    decisions().emplace(key, Decision{});  // claimed: other threads take the stock path
  }
  // A failed or absent profiler is remembered as "stock", not retried per call.
  std::shared_ptr<const Choice> choice;
  try {
    // The profiler's own reference and stock timings must not come back here.
    const BypassGuard bypass;
    if (profile_mode()) {
      // conv_profile: the full table (every candidate, logged) decides.
      const auto answer = call_python_profiler(json_request(key), describe_conv(key));
      if (answer && !answer->empty()) {
        choice = choice_from_flag_value(*answer);
      }
    } else {
      choice = tuned_or_stock(key);
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_mutex);
    decisions().erase(key);
    throw;
  }
  record(key, choice);
  *settled = true;
  return choice;
}

void clear_profile_decisions() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    decisions().clear();
  }
  invalidate_selections();  // the threads' memos hold the old picks' runners
}

size_t profile_decision_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  size_t done = 0;
  for (const auto& entry : decisions()) done += entry.second.done ? 1 : 0;
  return done;
}

}  // namespace torch_cudnn_algo
