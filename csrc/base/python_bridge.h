// The extension's only contact with CPython: the module init that lets
// `import torch_cudnn_algo._C` load this library (which registers the ops),
// log lines sent to the Python logger "torch_cudnn_algo", and the two
// callables the Python package installs (the profiler, the job coordinator).
#pragma once

#include <optional>
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

// While alive, this thread does not hold the GIL, whether it held it before or
// not (PyGILState_Ensure, then PyEval_SaveThread; undone on destruction). Wrap
// every wait on threads that may log to Python (log_to_python takes the GIL):
// waiting on such a thread while holding the GIL would deadlock both. Calls
// through torch's Python bindings (torch.ops included) already run without
// the GIL, but a C++ or pybind11 caller may hold it. Declare it before any
// lock guarding the wait, so the lock is released before the GIL is taken back.
class WithoutGil {
 public:
  WithoutGil();
  ~WithoutGil();
  WithoutGil(const WithoutGil&) = delete;
  WithoutGil& operator=(const WithoutGil&) = delete;

 private:
  bool active_ = false;
  int gil_state_ = 0;               // PyGILState_STATE
  void* thread_state_ = nullptr;    // PyThreadState*
};

// Calls the profiler the Python package installed (torch_cudnn_algo._C.
// _set_profiler) with `request` (a JSON object, see json_request) and
// the convolution's description, and returns its answer: the flag value of the candidate to run, "" for the
// stock path. nullopt when no profiler is installed or it raised (the profiler
// reports its own failures; an exception escaping it becomes a warning).
std::optional<std::string> call_python_profiler(const std::string& request,
                                                const std::string& description);

// What the job coordinator (torch_cudnn_algo._distributed, installed through
// _C._set_job_coordinator) answered: nothing (None), a text or bytes.
struct CoordinatorAnswer {
  enum class Kind { kNone, kText, kBytes } kind = Kind::kNone;
  std::string value;
};

// Calls the job coordinator with (op, scope, key, payload or None) and returns
// its answer; nullopt when none is installed or it raised (one warning: the
// caller then decides alone). Takes the GIL; the coordinator's waits on the
// process group's store release it.
std::optional<CoordinatorAnswer> call_python_coordinator(const char* op, const std::string& scope,
                                                         const std::string& key, const std::string* payload);

}  // namespace torch_cudnn_algo
