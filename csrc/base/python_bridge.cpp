// Built against CPython's stable ABI (Py_LIMITED_API), like the rest of the
// extension, so one wheel serves every Python version.
#define PY_SSIZE_T_CLEAN  // the "y#" format's length is a Py_ssize_t
#include <Python.h>

#include "base/python_bridge.h"

#include <c10/util/Exception.h>

namespace torch_cudnn_algo {

namespace {

// The Python profiler callable (a strong reference), or nullptr. Read and
// written only with the GIL held.
PyObject* g_profiler = nullptr;
// The Python job coordinator (a strong reference), or nullptr; the same rules.
PyObject* g_coordinator = nullptr;

// Text of the pending Python exception (cleared), for a warning.
std::string fetch_error_text() {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyObject* text = value ? PyObject_Str(value) : nullptr;
  const char* utf8 = text ? PyUnicode_AsUTF8AndSize(text, nullptr) : nullptr;
  std::string result = utf8 ? utf8 : "unknown error";
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  return result;
}

}  // namespace

void warn_to_python(const std::string& message) {
  if (!Py_IsInitialized()) {
    c10::warn(c10::Warning(c10::UserWarning(), {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                           message, /*verbatim=*/true));
    return;
  }
  const PyGILState_STATE gil = PyGILState_Ensure();
  std::string raised;
  if (PyErr_WarnEx(PyExc_UserWarning, message.c_str(), 1) != 0) {
    // A filter made it an error ("error" action): surface that as an exception.
    raised = fetch_error_text();
  }
  PyGILState_Release(gil);
  TORCH_CHECK(raised.empty(), raised);
}

WithoutGil::WithoutGil() {
  if (!Py_IsInitialized()) return;
  gil_state_ = static_cast<int>(PyGILState_Ensure());
  thread_state_ = PyEval_SaveThread();
  active_ = true;
}

WithoutGil::~WithoutGil() {
  if (!active_) return;
  PyEval_RestoreThread(static_cast<PyThreadState*>(thread_state_));
  PyGILState_Release(static_cast<PyGILState_STATE>(gil_state_));
}

void log_to_python(LogLevel level, const std::string& message) {
  if (!Py_IsInitialized()) {
    return;
  }
  const char* method = level == LogLevel::kDebug  ? "debug"
                       : level == LogLevel::kInfo ? "info"
                                                  : "warning";
  const PyGILState_STATE gil = PyGILState_Ensure();
  // Keep whatever error the caller's frame may hold out of our way.
  PyObject *saved_type, *saved_value, *saved_traceback;
  PyErr_Fetch(&saved_type, &saved_value, &saved_traceback);
  if (PyObject* logging = PyImport_ImportModule("logging")) {
    if (PyObject* logger = PyObject_CallMethod(logging, "getLogger", "s", "torch_cudnn_algo")) {
      // Passed as the format argument's value, so a '%' in the message is harmless.
      Py_XDECREF(PyObject_CallMethod(logger, method, "ss", "%s", message.c_str()));
      Py_DECREF(logger);
    }
    Py_DECREF(logging);
  }
  PyErr_Clear();
  PyErr_Restore(saved_type, saved_value, saved_traceback);
  PyGILState_Release(gil);
}


std::optional<std::string> call_python_profiler(const std::string& request,
                                                const std::string& description) {
  if (!Py_IsInitialized()) {
    return std::nullopt;
  }
  const PyGILState_STATE gil = PyGILState_Ensure();
  std::optional<std::string> answer;
  std::string failure;
  if (g_profiler != nullptr) {
    PyObject* profiler = g_profiler;
    Py_INCREF(profiler);  // the call may replace g_profiler
    PyObject* result = PyObject_CallFunction(profiler, "ss", request.c_str(), description.c_str());
    Py_DECREF(profiler);
    if (result == nullptr) {
      failure = fetch_error_text();
    } else {
      Py_ssize_t size = 0;
      const char* utf8 = PyUnicode_Check(result) ? PyUnicode_AsUTF8AndSize(result, &size) : nullptr;
      if (utf8 != nullptr) {
        answer = std::string(utf8, static_cast<size_t>(size));
      } else {
        PyErr_Clear();
        failure = "the profiler did not return a str";
      }
      Py_DECREF(result);
    }
  }
  PyGILState_Release(gil);
  if (!failure.empty()) {
    warn_to_python("torch_cudnn_algo: profiling failed (" + failure +
                   "); running PyTorch's own choice for this configuration");
  }
  return answer;
}

std::optional<CoordinatorAnswer> call_python_coordinator(const char* op, const std::string& scope,
                                                         const std::string& key, const std::string* payload) {
  if (!Py_IsInitialized()) {
    return std::nullopt;
  }
  const PyGILState_STATE gil = PyGILState_Ensure();
  std::optional<CoordinatorAnswer> answer;
  std::string failure;
  if (g_coordinator != nullptr) {
    PyObject* coordinator = g_coordinator;
    Py_INCREF(coordinator);  // the call may replace g_coordinator
    PyObject* result = payload == nullptr
                           ? PyObject_CallFunction(coordinator, "sssO", op, scope.c_str(), key.c_str(), Py_None)
                           : PyObject_CallFunction(coordinator, "sssy#", op, scope.c_str(), key.c_str(),
                                                   payload->data(), static_cast<Py_ssize_t>(payload->size()));
    Py_DECREF(coordinator);
    if (result == nullptr) {
      failure = fetch_error_text();
    } else {
      char* data = nullptr;
      Py_ssize_t size = 0;
      if (result == Py_None) {
        answer = CoordinatorAnswer{};
      } else if (PyBytes_Check(result) && PyBytes_AsStringAndSize(result, &data, &size) == 0) {
        answer = CoordinatorAnswer{CoordinatorAnswer::Kind::kBytes, std::string(data, static_cast<size_t>(size))};
      } else if (const char* utf8 = PyUnicode_Check(result) ? PyUnicode_AsUTF8AndSize(result, &size) : nullptr) {
        answer = CoordinatorAnswer{CoordinatorAnswer::Kind::kText, std::string(utf8, static_cast<size_t>(size))};
      } else {
        PyErr_Clear();
        failure = "the job coordinator returned neither None, str nor bytes";
      }
      Py_DECREF(result);
    }
  }
  PyGILState_Release(gil);
  if (!failure.empty()) {
    warn_to_python("torch_cudnn_algo: the job coordinator failed (" + failure +
                   "); this rank decides the configuration alone");
  }
  return answer;
}

}  // namespace torch_cudnn_algo

namespace {

// Replaces *slot (a strong reference or nullptr) with `callable` (None: nullptr).
PyObject* replace_callable(PyObject** slot, PyObject* callable, const char* setter) {
  if (callable != Py_None && !PyCallable_Check(callable)) {
    PyErr_Format(PyExc_TypeError, "%s expects a callable or None", setter);
    return nullptr;
  }
  PyObject* previous = *slot;
  Py_XINCREF(callable == Py_None ? nullptr : callable);
  *slot = callable == Py_None ? nullptr : callable;
  Py_XDECREF(previous);
  Py_RETURN_NONE;
}

PyObject* set_profiler(PyObject* /*module*/, PyObject* profiler) {
  return replace_callable(&torch_cudnn_algo::g_profiler, profiler, "_set_profiler");
}

PyObject* set_job_coordinator(PyObject* /*module*/, PyObject* coordinator) {
  return replace_callable(&torch_cudnn_algo::g_coordinator, coordinator, "_set_job_coordinator");
}

PyMethodDef module_methods[] = {
    {"_set_profiler", set_profiler, METH_O,
     "Installs the callable the extension asks to profile a new configuration (None removes it)."},
    {"_set_job_coordinator", set_job_coordinator, METH_O,
     "Installs the callable through which the ranks of a job share \"fastest\" decisions (None removes it)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

// `import torch_cudnn_algo._C` loads this library; its static initializers
// register the torch.ops.torch_cudnn_algo operators. The module only carries
// _set_profiler and _set_job_coordinator.
extern "C" PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1,
                                          module_methods};
  return PyModule_Create(&module_def);
}
