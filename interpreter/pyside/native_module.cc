#include "interpreter/pyside/native_module.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "interpreter/pyside/convert.h"
#include "interpreter/pyside/dispatch_library.h"

namespace chorus::pyside {
namespace {

// This copy of the library serves exactly one interpreter, so plain statics
// are per-interpreter state.
HostServices* g_host = nullptr;
int g_slot = -1;
int g_index = -1;
PyObject* g_deadline_exceeded = nullptr;
PyObject* g_call_failed = nullptr;  // _chorus.ModelCallFailed(message, code)

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

PyObject* ReportExit(PyObject* /*self*/, PyObject* arg) {
  const long status = PyLong_AsLong(arg);
  if (status == -1 && PyErr_Occurred()) return nullptr;
  g_host->ReportExit(static_cast<int>(status));
  Py_RETURN_NONE;
}

PyObject* ReferencesPython(PyObject* /*self*/, PyObject* arg) {
  const char* path = PyUnicode_AsUTF8(arg);
  if (path == nullptr) return nullptr;
  return PyBool_FromLong(g_host->ReferencesPython(path));
}

PyObject* ClaimRegistration(PyObject* /*self*/, PyObject* arg) {
  const char* key = PyUnicode_AsUTF8(arg);
  if (key == nullptr) return nullptr;
  StatusOr<bool> owner = false;
  // May wait for another interpreter to finish the registration.
  Py_BEGIN_ALLOW_THREADS owner = g_host->ClaimRegistration(key, g_slot);
  Py_END_ALLOW_THREADS if (!owner.ok()) {
    PyErr_SetString(PyExc_RuntimeError, owner.status().message().c_str());
    return nullptr;
  }
  return PyBool_FromLong(*owner);
}

PyObject* CompleteRegistration(PyObject* /*self*/, PyObject* args) {
  const char* key;
  int made;
  if (!PyArg_ParseTuple(args, "sp:complete_registration", &key, &made)) return nullptr;
  g_host->CompleteRegistration(key, g_slot, made != 0);
  Py_RETURN_NONE;
}

PyObject* OpenLibraryFn(PyObject* /*self*/, PyObject* args) {
  const char *kind, *ns, *dispatch_key, *file;
  int line;
  if (!PyArg_ParseTuple(args, "ssssi:open_library", &kind, &ns, &dispatch_key, &file, &line)) {
    return nullptr;
  }
  return OpenLibrary(kind, ns, dispatch_key, file, line);
}

PyObject* LibraryDefineFn(PyObject* /*self*/, PyObject* args) {
  PyObject *library, *tag_list = nullptr;
  const char *schema, *alias_analysis;
  if (!PyArg_ParseTuple(args, "Oss|O:library_define", &library, &schema, &alias_analysis,
                        &tag_list)) {
    return nullptr;
  }
  std::vector<int> tags;
  if (tag_list != nullptr) {
    PyObject* seq = PySequence_Fast(tag_list, "tags must be a sequence of ints");
    if (seq == nullptr) return nullptr;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); ++i) {
      tags.push_back(static_cast<int>(PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i))));
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) return nullptr;
  }
  return LibraryDefine(library, schema, alias_analysis, tags);
}

PyObject* LibraryImplFn(PyObject* /*self*/, PyObject* args) {
  PyObject *library, *fn;
  const char *name, *dispatch_key, *key = "";
  int with_keyset = 0;
  if (!PyArg_ParseTuple(args, "OssO|ps:library_impl", &library, &name, &dispatch_key, &fn,
                        &with_keyset, &key)) {
    return nullptr;
  }
  return LibraryImpl(library, name, dispatch_key, fn, with_keyset != 0, key);
}

PyObject* AddKernelFunction(PyObject* /*self*/, PyObject* args) {
  PyObject* fn;
  const char* key;
  int with_keyset = 0;
  if (!PyArg_ParseTuple(args, "sO|p:add_kernel_function", &key, &fn, &with_keyset)) {
    return nullptr;
  }
  Py_INCREF(fn);  // kept for the interpreter's life, as the kernel it stands for
  g_host->AddKernelFunction(key, g_slot, fn, with_keyset != 0);
  Py_RETURN_NONE;
}

PyObject* LibraryFallbackFn(PyObject* /*self*/, PyObject* args) {
  PyObject *library, *fn;
  const char* dispatch_key;
  int with_keyset = 0;
  if (!PyArg_ParseTuple(args, "OsO|p:library_fallback", &library, &dispatch_key, &fn,
                        &with_keyset)) {
    return nullptr;
  }
  return LibraryFallback(library, dispatch_key, fn, with_keyset != 0);
}

PyObject* LibraryResetFn(PyObject* /*self*/, PyObject* library) { return LibraryReset(library); }

// Raises _chorus.ModelCallFailed(message, code name) for `status`.
PyObject* RaiseCallFailed(const Status& status) {
  PyObject* args = Py_BuildValue("(ss)", status.message().c_str(), StatusCodeName(status.code()));
  if (args != nullptr) PyErr_SetObject(g_call_failed, args);
  Py_XDECREF(args);
  return nullptr;
}

// `dict` (name -> tensor or string tensor) as named values; false with an
// exception set for anything else.
bool NamedValuesFrom(PyObject* dict, NamedValues* out) {
  if (!PyDict_Check(dict)) {
    PyErr_SetString(PyExc_TypeError, "inputs must be a dict: input name -> tensor");
    return false;
  }
  PyObject *key, *value;
  for (Py_ssize_t at = 0; PyDict_Next(dict, &at, &key, &value);) {
    const char* name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : nullptr;
    if (name == nullptr) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "input names must be str");
      return false;
    }
    c10::IValue converted;
    if (!PythonToIValue(value, &converted)) return false;
    out->emplace_back(name, std::move(converted));
  }
  return true;
}

bool StringsFrom(PyObject* list, std::vector<std::string>* out) {
  if (list == Py_None) return true;
  PyObject* seq = PySequence_Fast(list, "outputs must be a list of output names");
  if (seq == nullptr) return false;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); ++i) {
    const char* name = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
    if (name == nullptr) break;
    out->emplace_back(name);
  }
  Py_DECREF(seq);
  return !PyErr_Occurred();
}

// model_call_start(model, inputs, version, outputs, timeout, stream, wait) -> handle
PyObject* ModelCallStart(PyObject* /*self*/, PyObject* args) {
  const char *model, *version = "";
  PyObject *inputs, *outputs = Py_None;
  double timeout = 0;
  int stream = 0, wait = 1;
  if (!PyArg_ParseTuple(args, "sO|sOdpp:model_call_start", &model, &inputs, &version, &outputs,
                        &timeout, &stream, &wait)) {
    return nullptr;
  }
  ModelCall call;
  call.model = model;
  call.version = version;
  call.caller_waits = wait != 0;
  if (!NamedValuesFrom(inputs, &call.inputs) || !StringsFrom(outputs, &call.outputs)) {
    return nullptr;
  }
  const auto limit = std::chrono::nanoseconds(static_cast<int64_t>(std::max(0.0, timeout) * 1e9));
  StatusOr<uint64_t> handle = UnavailableError("");
  // Starting may take locks other interpreters' threads hold.
  Py_BEGIN_ALLOW_THREADS handle = g_host->StartModelCall(std::move(call), limit, stream != 0);
  Py_END_ALLOW_THREADS if (!handle.ok()) return RaiseCallFailed(handle.status());
  return PyLong_FromUnsignedLongLong(*handle);
}

// model_call_next(handle) -> {name: tensor} or None at the end
PyObject* ModelCallNext(PyObject* /*self*/, PyObject* arg) {
  const uint64_t handle = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return nullptr;
  StatusOr<std::optional<NamedValues>> next = std::optional<NamedValues>();
  Py_BEGIN_ALLOW_THREADS next = g_host->NextModelResponse(handle);
  Py_END_ALLOW_THREADS if (!next.ok()) return RaiseCallFailed(next.status());
  if (!next->has_value()) Py_RETURN_NONE;
  PyObject* dict = PyDict_New();
  for (const auto& [name, value] : **next) {
    PyObject* converted = dict ? IValueToPython(value) : nullptr;
    if (converted == nullptr || PyDict_SetItemString(dict, name.c_str(), converted) < 0) {
      Py_XDECREF(converted);
      Py_XDECREF(dict);
      return nullptr;
    }
    Py_DECREF(converted);
  }
  return dict;
}

PyObject* ModelCallEnd(PyObject* /*self*/, PyObject* arg) {
  const uint64_t handle = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return nullptr;
  g_host->EndModelCall(handle);
  Py_RETURN_NONE;
}

std::atomic<void*> g_autograd_engine{nullptr};

PyObject* BeginExclusive(PyObject* /*self*/, PyObject* /*unused*/) {
  Py_BEGIN_ALLOW_THREADS  // may wait for another interpreter
      g_host->BeginExclusive();
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

PyObject* EndExclusive(PyObject* /*self*/, PyObject* /*unused*/) {
  g_host->EndExclusive();
  Py_RETURN_NONE;
}

PyObject* TakeAutogradEngine(PyObject* /*self*/, PyObject* /*unused*/) {
  g_autograd_engine.store(g_host->TakeAutogradEngine(), std::memory_order_release);
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"report_exit", ReportExit, METH_O,
     "report_exit(status): log what this thread runs and its Python stack (before os._exit)"},
    {"begin_exclusive", BeginExclusive, METH_NOARGS,
     "begin_exclusive(): wait until no other interpreter is in an exclusive section"},
    {"end_exclusive", EndExclusive, METH_NOARGS, "end_exclusive(): leave the exclusive section"},
    {"take_autograd_engine", TakeAutogradEngine, METH_NOARGS,
     "take_autograd_engine(): keep torch._C's new autograd engine; route the default"},
    {"prepare_extension", PrepareExtension, METH_O,
     "prepare_extension(path) -> path of this interpreter's loaded copy"},
    {"references_python", ReferencesPython, METH_O,
     "references_python(path) -> True if the library links libpython or torch's bindings"},
    {"claim_registration", ClaimRegistration, METH_O,
     "claim_registration(key) -> True if this interpreter must make the registration"},
    {"complete_registration", CompleteRegistration, METH_VARARGS,
     "complete_registration(key, made): the owner made (or failed) the registration"},
    {"open_library", OpenLibraryFn, METH_VARARGS,
     "open_library(kind, ns, dispatch_key, file, line) -> dispatcher library handle"},
    {"library_define", LibraryDefineFn, METH_VARARGS,
     "library_define(library, schema, alias_analysis, tags=()) -> operator name"},
    {"library_impl", LibraryImplFn, METH_VARARGS,
     "library_impl(library, name, dispatch_key, fn, with_keyset=False, key=''): register a kernel"},
    {"add_kernel_function", AddKernelFunction, METH_VARARGS,
     "add_kernel_function(key, fn, with_keyset=False): this interpreter's function for a kernel "
     "another interpreter registered"},
    {"library_fallback", LibraryFallbackFn, METH_VARARGS,
     "library_fallback(library, dispatch_key, fn, with_keyset=False): register a fallback"},
    {"model_call_start", ModelCallStart, METH_VARARGS,
     "model_call_start(model, inputs, version='', outputs=None, timeout=0.0, stream=False, "
     "wait=True) -> handle: call a served model (chorus.serving); wait=False: never on this "
     "thread"},
    {"model_call_next", ModelCallNext, METH_O,
     "model_call_next(handle) -> the call's next outputs {name: tensor}, or None at its end"},
    {"model_call_end", ModelCallEnd, METH_O, "model_call_end(handle): forget (and stop) the call"},
    {"library_reset", LibraryResetFn, METH_O,
     "library_reset(library): remove the library's registrations and close it"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT,
                       "_chorus",
                       "chorus' native hooks for this interpreter",
                       -1,
                       kMethods,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr};

PyObject* InitModule() {
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  g_deadline_exceeded = PyErr_NewExceptionWithDoc(
      "chorus.DeadlineExceeded", "Raised inside a call that ran past its deadline.",
      PyExc_BaseException, nullptr);
  g_call_failed = PyErr_NewExceptionWithDoc(
      "_chorus.ModelCallFailed", "A call to a served model failed: args (message, status code).",
      PyExc_RuntimeError, nullptr);
  if (g_deadline_exceeded == nullptr || g_call_failed == nullptr ||
      PyModule_AddObjectRef(module, "ModelCallFailed", g_call_failed) < 0 ||
      PyModule_AddObjectRef(module, "DeadlineExceeded", g_deadline_exceeded) < 0 ||
      PyModule_AddIntConstant(module, "index", g_index) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}

}  // namespace

void RegisterNativeModule(HostServices* host, int slot, int index) {
  g_host = host;
  g_slot = slot;
  g_index = index;
  PyImport_AppendInittab("_chorus", &InitModule);
}

PyObject* DeadlineExceededType() { return g_deadline_exceeded; }

HostServices* Host() { return g_host; }

void* AutogradEngine() { return g_autograd_engine.load(std::memory_order_acquire); }

int LibrarySlot() { return g_slot; }

}  // namespace chorus::pyside
