// The extension's only contact with CPython: the module init that lets
// `import torch_cudnn_algo._C` load this library (which registers the ops),
// and log lines sent to the Python logger "torch_cudnn_algo".
#pragma once

#include <string>

namespace torch_cudnn_algo {

enum class LogLevel : int { kDebug = 10, kInfo = 20, kWarning = 30 };

// Sends `message` to logging.getLogger("torch_cudnn_algo"). Takes the GIL, so
// never call it while holding a lock a Python thread may wait for. Never throws:
// a logging failure must not break a convolution.
void log_to_python(LogLevel level, const std::string& message);

}  // namespace torch_cudnn_algo
