#include "selection.h"

#include "graph_runner.h"
#include "legacy_algorithms.h"
#include "legacy_runner.h"
#include "overrides.h"
#include "python_bridge.h"

#include <array>
#include <mutex>

namespace torch_cudnn_algo {
namespace {

// Read with std::atomic_load: the published Choice is immutable.
std::array<std::shared_ptr<const Choice>, kNumDirections> g_choices;
std::atomic<bool> g_strict{false};
// Serializes writers so the registered overrides always match the last write.
std::mutex g_write_mutex;

void publish(Direction direction, std::shared_ptr<const Choice> choice) {
  std::vector<std::string> log_lines;
  {
    std::lock_guard<std::mutex> lock(g_write_mutex);
    auto& slot = g_choices[static_cast<int>(direction)];
    auto previous = std::atomic_exchange(&slot, std::move(choice));
    try {
      log_lines = sync_overrides();
    } catch (...) {
      std::atomic_store(&slot, std::move(previous));
      throw;
    }
  }
  // Logged after unlocking: logging takes the GIL, and a Python thread holding
  // the GIL may be waiting for g_write_mutex.
  for (const auto& line : log_lines) {
    log_to_python(LogLevel::kInfo, line);
  }
}

void handle_refusal(const Plan& plan, const Choice& choice) {
  const ConvKey& key = plan.key;
  std::string alternatives;
  for (const auto& name : plan.alternatives) {
    alternatives += (alternatives.empty() ? "" : ", ") + name;
  }
  if (alternatives.empty()) alternatives = "none";
  const char* kind = choice.is_engine() ? "Engine configurations" : "Legacy algorithms";
  const std::string asked = std::string("torch.backends.cudnn.") +
                            direction_flag_name(key.dir()) + " = " +
                            (choice.is_engine() ? "'" + choice.engine + "'" : plan.choice);
  if (strict_mode()) {
    TORCH_CHECK(false, "torch_cudnn_algo: ", asked, " cannot run this convolution: ",
                plan.refusal, ".\n  convolution: ", describe_conv(key), "\n  ", kind,
                " that can run it: ", alternatives,
                "\n  (conv_algo_strict=True makes this an error; with False the stock path runs "
                "after a warning)\nRepro:\n",
                python_repro(key, choice.python_literal(key.dir()), /*strict=*/true));
  }
  if (!plan.warned.exchange(true)) {
    warn_to_python("torch_cudnn_algo: " + asked + " cannot run this convolution: " + plan.refusal +
              ". " + kind + " that can run it: " + alternatives +
              ". Running PyTorch's own choice instead (set "
              "torch.backends.cudnn.conv_algo_strict = True to make this an error). "
              "Convolution: " + describe_conv(key));
  }
}

}  // namespace

std::string Choice::python_literal(Direction direction) const {
  if (is_engine()) return "'" + engine + "'";
  return std::to_string(legacy_algo) + "  # " + legacy_algo_name(direction, legacy_algo);
}

std::shared_ptr<const Choice> pinned_choice(Direction direction) {
  return std::atomic_load(&g_choices[static_cast<int>(direction)]);
}

void set_pinned_legacy_algo(Direction direction, int algo) {
  if (algo == kNoChoice) {
    publish(direction, nullptr);
    return;
  }
  TORCH_CHECK_VALUE(algo >= 0 && algo < legacy_algo_count(direction), "torch_cudnn_algo: ",
                    direction_name(direction), " legacy algorithm must be in [0, ",
                    legacy_algo_count(direction), ") or None, got ", algo);
  TORCH_CHECK_VALUE(legacy_algo_is_implemented(direction, algo), "torch_cudnn_algo: ",
                    direction_name(direction), " algorithm ",
                    describe_legacy_algo(direction, algo), " is not implemented by cuDNN");
  auto choice = std::make_shared<Choice>();
  choice->legacy_algo = algo;
  publish(direction, std::move(choice));
}

void set_pinned_engine(Direction direction, const std::string& name) {
  if (name.empty()) {
    publish(direction, nullptr);
    return;
  }
  auto choice = std::make_shared<Choice>();
  choice->engine = parse_engine_name(name).canonical;  // validates
  publish(direction, std::move(choice));
}

bool strict_mode() {
  return g_strict.load(std::memory_order_relaxed);
}

void set_strict_mode(bool strict) {
  g_strict.store(strict);
}

std::shared_ptr<const Plan> runnable_pinned_plan(const Choice& choice, ConvKey key) {
  bool created = false;
  std::shared_ptr<const Plan> plan;
  if (choice.is_engine()) {
    key.algo = kNoChoice;
    plan = get_graph_plan(key, choice.engine, &created);
  } else {
    key.algo = choice.legacy_algo;
    plan = get_legacy_plan(key, &created);
  }
  if (!plan->refusal.empty()) {
    handle_refusal(*plan, choice);
    return nullptr;
  }
  if (created) {
    log_to_python(LogLevel::kInfo, std::string("requested ") + direction_name(key.dir()) +
                                       " algorithm " + plan->choice + " is set | " +
                                       describe_conv(key));
  }
  return plan;
}

}  // namespace torch_cudnn_algo
