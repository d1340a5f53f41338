#include "interpreter/pyside/python_error.h"

#include <Python.h>

#include <string>

#include "interpreter/pyside/native_module.h"

namespace chorus::pyside {
namespace {

std::string Utf8(PyObject* text) {
  if (text == nullptr) return "";
  const char* data = PyUnicode_AsUTF8(text);
  if (data == nullptr) {
    PyErr_Clear();
    return "";
  }
  return data;
}

// str(obj), or "" if that fails.
std::string Str(PyObject* obj) {
  PyObject* text = PyObject_Str(obj);
  std::string result = Utf8(text);
  Py_XDECREF(text);
  if (text == nullptr) PyErr_Clear();
  return result;
}

std::string TypeName(PyObject* type) {
  auto* t = reinterpret_cast<PyTypeObject*>(type);
  PyObject* module = PyObject_GetAttrString(type, "__module__");
  std::string module_name = module != nullptr && PyUnicode_Check(module) ? Utf8(module) : "";
  Py_XDECREF(module);
  PyErr_Clear();
  std::string name = t->tp_name;
  size_t dot = name.rfind('.');
  if (dot != std::string::npos) name = name.substr(dot + 1);
  if (module_name.empty() || module_name == "builtins") return name;
  return module_name + "." + name;
}

std::string FormatTraceback(PyObject* type, PyObject* value, PyObject* traceback) {
  PyObject* module = PyImport_ImportModule("traceback");
  PyObject* lines = module == nullptr ? nullptr
                                      : PyObject_CallMethod(module, "format_exception", "OOO", type,
                                                            value, traceback ? traceback : Py_None);
  std::string text;
  if (lines != nullptr) {
    PyObject* empty = PyUnicode_FromString("");
    PyObject* joined = empty ? PyUnicode_Join(empty, lines) : nullptr;
    text = Utf8(joined);
    Py_XDECREF(joined);
    Py_XDECREF(empty);
  }
  Py_XDECREF(lines);
  Py_XDECREF(module);
  PyErr_Clear();
  return text;
}

// Python's MemoryError, torch's OutOfMemoryError (CUDA), or the RuntimeError
// torch's CPU allocator raises when malloc fails (as it does past the
// server's memory limit): the request asked for more memory than there is.
bool IsOutOfMemory(PyObject* type, const PythonError& error) {
  if (PyErr_GivenExceptionMatches(type, PyExc_MemoryError)) return true;
  if (error.type == "torch.OutOfMemoryError") return true;
  return error.message.find("DefaultCPUAllocator: can't allocate memory") != std::string::npos ||
         error.message.find("DefaultCPUAllocator: not enough memory") != std::string::npos;
}

}  // namespace

Status FetchPythonError() {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  if (type == nullptr) return InternalError("Python call failed without an exception");
  PyErr_NormalizeException(&type, &value, &traceback);
  PythonError error;
  error.type = TypeName(type);
  error.message = value != nullptr ? Str(value) : "";
  error.traceback = FormatTraceback(type, value, traceback);
  PyObject* deadline = DeadlineExceededType();
  const bool timed_out = deadline != nullptr && PyErr_GivenExceptionMatches(type, deadline);
  const bool out_of_memory = IsOutOfMemory(type, error);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  std::string message = error.message.empty() ? error.type : error.type + ": " + error.message;
  const StatusCode code = timed_out       ? StatusCode::kDeadlineExceeded
                          : out_of_memory ? StatusCode::kResourceExhausted
                                          : StatusCode::kInternal;
  return Status(code, message).WithPythonError(std::move(error));
}

}  // namespace chorus::pyside
