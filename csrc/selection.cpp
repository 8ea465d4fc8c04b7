#include "selection.h"

#include "legacy_algorithms.h"
#include "legacy_runner.h"
#include "overrides.h"
#include "python_bridge.h"

#include <array>
#include <atomic>
#include <mutex>

namespace torch_cudnn_algo {
namespace {

std::array<std::atomic<int>, kNumDirections> g_pinned_algo{kNoChoice, kNoChoice, kNoChoice};
std::atomic<bool> g_strict{false};
// Serializes writers so the registered overrides always match the last write.
std::mutex g_write_mutex;

}  // namespace

int pinned_legacy_algo(Direction direction) {
  return g_pinned_algo[static_cast<int>(direction)].load(std::memory_order_relaxed);
}

void set_pinned_legacy_algo(Direction direction, int algo) {
  if (algo != kNoChoice) {
    TORCH_CHECK_VALUE(algo >= 0 && algo < legacy_algo_count(direction), "torch_cudnn_algo: ",
                      direction_name(direction), " legacy algorithm must be in [0, ",
                      legacy_algo_count(direction), ") or None, got ", algo);
    TORCH_CHECK_VALUE(legacy_algo_is_implemented(direction, algo), "torch_cudnn_algo: ",
                      direction_name(direction), " algorithm ",
                      describe_legacy_algo(direction, algo), " is not implemented by cuDNN");
  }
  std::vector<std::string> log_lines;
  {
    std::lock_guard<std::mutex> lock(g_write_mutex);
    const int previous = g_pinned_algo[static_cast<int>(direction)].exchange(algo);
    try {
      log_lines = sync_overrides();
    } catch (...) {
      g_pinned_algo[static_cast<int>(direction)].store(previous);
      throw;
    }
  }
  // Logged after unlocking: logging takes the GIL, and a Python thread holding
  // the GIL may be waiting for g_write_mutex.
  for (const auto& line : log_lines) {
    log_to_python(LogLevel::kInfo, line);
  }
}

bool strict_mode() {
  return g_strict.load(std::memory_order_relaxed);
}

void set_strict_mode(bool strict) {
  g_strict.store(strict);
}

namespace {

void handle_refusal(const LegacyPlan& plan) {
  const ConvKey& key = plan.key;
  std::string runnable;
  for (const int algo : plan.runnable_algos) {
    runnable += (runnable.empty() ? "" : ", ") + describe_legacy_algo(key.dir(), algo);
  }
  if (runnable.empty()) runnable = "none";
  const std::string asked = std::string("torch.backends.cudnn.") + direction_flag_name(key.dir()) +
                            " = " + describe_legacy_algo(key.dir(), key.algo);
  if (strict_mode()) {
    TORCH_CHECK(false, "torch_cudnn_algo: ", asked, " cannot run this convolution: ",
                plan.refusal, ".\n  convolution: ", describe_conv(key),
                "\n  legacy algorithms that can run it: ", runnable,
                "\n  (conv_algo_strict=True makes this an error; with False the stock path runs "
                "after a warning)\nRepro:\n",
                python_repro(key, /*strict=*/true));
  }
  if (!plan.warned.exchange(true)) {
    warn_user("torch_cudnn_algo: " + asked + " cannot run this convolution: " + plan.refusal +
              ". Legacy algorithms that can run it: " + runnable +
              ". Running PyTorch's own choice instead (set "
              "torch.backends.cudnn.conv_algo_strict = True to make this an error). "
              "Convolution: " + describe_conv(key));
  }
}

}  // namespace

std::shared_ptr<const LegacyPlan> runnable_pinned_plan(const ConvKey& key) {
  bool created = false;
  auto plan = get_legacy_plan(key, &created);
  if (!plan->refusal.empty()) {
    handle_refusal(*plan);
    return nullptr;
  }
  if (created) {
    log_to_python(LogLevel::kInfo, std::string("requested ") + direction_name(key.dir()) +
                                       " algorithm " + describe_legacy_algo(key.dir(), key.algo) +
                                       " is set | " + describe_conv(key));
  }
  return plan;
}

}  // namespace torch_cudnn_algo
