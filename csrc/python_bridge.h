// The extension's only contact with CPython: the module init that lets
// `import torch_cudnn_algo._C` load this library (which registers the ops),
// and log lines sent to the Python logger "torch_cudnn_algo".
#pragma once

#include <string>

namespace torch_cudnn_algo {

enum class LogLevel : int { kDebug = 10, kInfo = 20, kWarning = 30 };

// Issues a Python UserWarning (warnings.warn) from any thread, so warnings
// reach Python's filters on every call path (torch.ops calls and the autograd
// thread included). Falls back to torch's C++ warning handler without Python.
// If the filters turn the warning into an error, raises it as a RuntimeError.
void warn_to_python(const std::string& message);

// Sends `message` to logging.getLogger("torch_cudnn_algo"). Takes the GIL, so
// never call it while holding a lock a Python thread may wait for. Never throws:
// a logging failure must not break a convolution.
void log_to_python(LogLevel level, const std::string& message);

}  // namespace torch_cudnn_algo
