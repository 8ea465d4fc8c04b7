// Built against CPython's stable ABI (Py_LIMITED_API), like the rest of the
// extension, so one wheel serves every Python version.
#include <Python.h>

#include "python_bridge.h"

#include <c10/util/Exception.h>

namespace torch_cudnn_algo {

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
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject* text = value ? PyObject_Str(value) : nullptr;
    const char* utf8 = text ? PyUnicode_AsUTF8AndSize(text, nullptr) : nullptr;
    raised = utf8 ? utf8 : message;
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    PyErr_Clear();
  }
  PyGILState_Release(gil);
  TORCH_CHECK(raised.empty(), raised);
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

}  // namespace torch_cudnn_algo

// `import torch_cudnn_algo._C` loads this library; its static initializers
// register the torch.ops.torch_cudnn_algo operators. The module itself is empty.
extern "C" PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
