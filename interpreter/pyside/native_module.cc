#include "interpreter/pyside/native_module.h"

#include <string>

#include "interpreter/pyside/python_kernel.h"

namespace chorus::pyside {
namespace {

// This copy of the library serves exactly one interpreter, so plain statics
// are per-interpreter state.
HostServices* g_host = nullptr;
int g_slot = -1;
PyObject* g_deadline_exceeded = nullptr;

PyObject* PrepareExtension(PyObject* /*self*/, PyObject* arg) {
  const char* path = PyUnicode_AsUTF8(arg);
  if (path == nullptr) return nullptr;
  StatusOr<std::string> copy = g_host->PrepareExtension(g_slot, path);
  if (!copy.ok()) {
    PyErr_Format(PyExc_ImportError, "chorus: cannot load extension %s: %s", path,
                 copy.status().message().c_str());
    return nullptr;
  }
  return PyUnicode_FromStringAndSize(copy->data(), static_cast<Py_ssize_t>(copy->size()));
}

PyObject* ClaimRegistration(PyObject* /*self*/, PyObject* arg) {
  const char* key = PyUnicode_AsUTF8(arg);
  if (key == nullptr) return nullptr;
  return PyBool_FromLong(g_host->ClaimRegistration(key, g_slot));
}

PyObject* RegisterKernel(PyObject* /*self*/, PyObject* args) {
  const char *ns, *name, *dispatch_key;
  PyObject* fn;
  if (!PyArg_ParseTuple(args, "sssO:register_python_kernel", &ns, &name, &dispatch_key, &fn)) {
    return nullptr;
  }
  return RegisterPythonKernel(ns, name, dispatch_key, fn);
}

PyMethodDef kMethods[] = {
    {"prepare_extension", PrepareExtension, METH_O,
     "prepare_extension(path) -> path of this interpreter's loaded copy"},
    {"claim_registration", ClaimRegistration, METH_O,
     "claim_registration(key) -> True if this interpreter owns the registration"},
    {"register_python_kernel", RegisterKernel, METH_VARARGS,
     "register_python_kernel(ns, name, dispatch_key, fn) -> registration handle"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_chorus",
                       "chorus' native hooks for this interpreter", -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};

PyObject* InitModule() {
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  g_deadline_exceeded = PyErr_NewExceptionWithDoc(
      "chorus.DeadlineExceeded", "Raised inside a call that ran past its deadline.",
      PyExc_BaseException, nullptr);
  if (g_deadline_exceeded == nullptr ||
      PyModule_AddObjectRef(module, "DeadlineExceeded", g_deadline_exceeded) < 0 ||
      PyModule_AddIntConstant(module, "slot", g_slot) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}

}  // namespace

void RegisterNativeModule(HostServices* host, int slot) {
  g_host = host;
  g_slot = slot;
  PyImport_AppendInittab("_chorus", &InitModule);
}

PyObject* DeadlineExceededType() { return g_deadline_exceeded; }

}  // namespace chorus::pyside
