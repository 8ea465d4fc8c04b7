// The table of the three overrides (which ATen kernel, when it is needed, how
// it is registered) and the writes that bring them in line with the flag state.
#include "overrides/overrides.h"

#include "base/python_bridge.h"
#include "decide/flag_state.h"
#include "decide/selection.h"

#include <torch/library.h>

#include <array>
#include <memory>
#include <mutex>

namespace torch_cudnn_algo {
namespace {

// Swallows the dispatcher's "Overriding a previously registered kernel" warning
// (replacing the kernel is the point; we log our own line) and forwards the rest.
class OverrideWarningFilter : public c10::WarningHandler {
 public:
  explicit OverrideWarningFilter(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("Overriding a previously registered kernel") != std::string::npos) {
      return;
    }
    next_->process(warning);
  }

 private:
  c10::WarningHandler* next_;
};

struct Override {
  const char* op_name;
  bool (*needed)();
  void (*register_kernel)(torch::Library&);
  std::unique_ptr<torch::Library> library;  // non-null while registered
};

bool forward_active() {
  return direction_active(Direction::kForward);
}

bool backward_data_active() {
  return direction_active(Direction::kBackwardData);
}

// convolution_backward serves every direction: a transposed convolution's input
// gradient is a forward call.
bool any_direction_active() {
  for (int i = 0; i < kNumDirections; ++i) {
    if (direction_active(static_cast<Direction>(i))) return true;
  }
  return false;
}

// Leaked on purpose: a torch::Library destroyed by a static destructor may
// deregister from an already-destroyed dispatcher.
std::array<Override, 3>& overrides() {
  static auto* table = new std::array<Override, 3>{
      Override{"aten::cudnn_convolution", &forward_active, &register_forward_override, nullptr},
      Override{"aten::cudnn_convolution_transpose", &backward_data_active,
               &register_transpose_override, nullptr},
      Override{"aten::convolution_backward", &any_direction_active, &register_backward_override,
               nullptr},
  };
  return *table;
}

std::unique_ptr<torch::Library> make_cuda_library(const Override& entry) {
  OverrideWarningFilter filter(c10::WarningUtils::get_warning_handler());
  c10::WarningUtils::WarningHandlerGuard guard(&filter);
  auto library = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", std::make_optional(c10::DispatchKey::CUDA), __FILE__,
      __LINE__);
  entry.register_kernel(*library);
  return library;
}

// Guards the `library` members of the table.
std::mutex g_overrides_mutex;

// Serializes writers so the registered overrides always match the last write.
std::mutex g_write_mutex;

}  // namespace

std::vector<std::string> sync_overrides() {
  std::lock_guard<std::mutex> lock(g_overrides_mutex);
  std::vector<std::string> log_lines;
  for (auto& entry : overrides()) {
    const bool needed = entry.needed();
    if (needed && !entry.library) {
      entry.library = make_cuda_library(entry);
      log_lines.push_back(std::string("registered override of ") + entry.op_name +
                          " (CUDA) for the pinned algorithm or conv_profile");
    } else if (!needed && entry.library) {
      entry.library.reset();
      log_lines.push_back(std::string("removed override of ") + entry.op_name +
                          "; ATen's kernel is back");
    }
  }
  return log_lines;
}

std::vector<std::string> registered_override_names() {
  std::lock_guard<std::mutex> lock(g_overrides_mutex);
  std::vector<std::string> names;
  for (const auto& entry : overrides()) {
    if (entry.library) names.emplace_back(entry.op_name);
  }
  return names;
}

void pin_choice(Direction direction, std::shared_ptr<const Choice> choice) {
  std::vector<std::string> log_lines;
  {
    std::lock_guard<std::mutex> lock(g_write_mutex);
    auto previous = exchange_pinned_choice(direction, std::move(choice));
    try {
      log_lines = sync_overrides();
    } catch (...) {
      exchange_pinned_choice(direction, std::move(previous));
      invalidate_selections();
      throw;
    }
    invalidate_selections();
  }
  // Logged after unlocking: logging takes the GIL, and a Python thread holding
  // the GIL may be waiting for g_write_mutex.
  for (const auto& line : log_lines) {
    log_to_python(LogLevel::kInfo, line);
  }
}

void resync_overrides() {
  std::vector<std::string> log_lines;
  {
    std::lock_guard<std::mutex> lock(g_write_mutex);
    log_lines = sync_overrides();
  }
  for (const auto& line : log_lines) {
    log_to_python(LogLevel::kInfo, line);
  }
}

void refresh_overrides() {
  resync_overrides();
  invalidate_selections();
}

}  // namespace torch_cudnn_algo
