// Built against CPython's stable ABI (Py_LIMITED_API), like the rest of the
// extension, so one wheel serves every Python version.
#include <Python.h>

#include "python_bridge.h"

namespace torch_cudnn_algo {

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
