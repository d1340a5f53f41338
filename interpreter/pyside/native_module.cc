#include "interpreter/pyside/native_module.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "interpreter/pyside/convert.h"
#include "interpreter/pyside/dispatch_library.h"
#include "interpreter/pyside/gil_scope.h"
#include "interpreter/pyside/host_object_type.h"

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
  // May wait for another interpreter to finish the registration.
  StatusOr<bool> owner = WithoutGil([&] { return g_host->ClaimRegistration(key, g_slot); });
  if (!owner.ok()) {
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

// `dict` (name -> bool, int, float or str) as parameters; None: none.
bool ParametersFrom(PyObject* dict, Parameters* out) {
  if (dict == Py_None) return true;
  if (!PyDict_Check(dict)) {
    PyErr_SetString(PyExc_TypeError, "parameters must be a dict: name -> bool, int, float or str");
    return false;
  }
  PyObject *key, *value;
  for (Py_ssize_t at = 0; PyDict_Next(dict, &at, &key, &value);) {
    const char* name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : nullptr;
    if (name == nullptr) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "parameter names must be str");
      return false;
    }
    if (PyBool_Check(value)) {
      (*out)[name] = value == Py_True;
    } else if (PyLong_Check(value)) {
      (*out)[name] = static_cast<int64_t>(PyLong_AsLongLong(value));
    } else if (PyFloat_Check(value)) {
      (*out)[name] = PyFloat_AS_DOUBLE(value);
    } else if (const char* text = PyUnicode_Check(value) ? PyUnicode_AsUTF8(value) : nullptr) {
      (*out)[name] = std::string(text);
    } else {
      if (!PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "parameter '%s' must be a bool, int, float or str", name);
      }
      return false;
    }
    if (PyErr_Occurred()) return false;
  }
  return true;
}

// A correlation id: an int (>= 0) or a str.
bool CorrelationIdFrom(PyObject* id, ModelCall* call) {
  if (id == nullptr || id == Py_None) return true;
  if (PyUnicode_Check(id)) {
    const char* text = PyUnicode_AsUTF8(id);
    if (text == nullptr) return false;
    call->correlation_id = std::string(text);
    return true;
  }
  const unsigned long long number = PyLong_AsUnsignedLongLong(id);
  if (PyErr_Occurred()) return false;
  call->correlation_id = static_cast<uint64_t>(number);
  return true;
}

// model_call_start(model, inputs, version, outputs, timeout, stream, wait, *,
//                  parameters=None, request_id="", correlation_id=0, flags=0) -> handle
PyObject* ModelCallStart(PyObject* /*self*/, PyObject* args, PyObject* kwargs) {
  static const char* kKeywords[] = {"model",      "inputs",         "version", "outputs",
                                    "timeout",    "stream",         "wait",    "parameters",
                                    "request_id", "correlation_id", "flags",   nullptr};
  const char *model, *version = "", *request_id = "";
  PyObject *inputs, *outputs = Py_None, *parameters = Py_None, *correlation_id = nullptr;
  double timeout = 0;
  int stream = 0, wait = 1;
  unsigned int flags = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|sOdpp$OsOI:model_call_start",
                                   const_cast<char**>(kKeywords), &model, &inputs, &version,
                                   &outputs, &timeout, &stream, &wait, &parameters, &request_id,
                                   &correlation_id, &flags)) {
    return nullptr;
  }
  ModelCall call;
  call.model = model;
  call.version = version;
  call.caller_waits = wait != 0;
  call.request_id = request_id;
  call.flags = flags;
  if (!NamedValuesFrom(inputs, &call.inputs) || !StringsFrom(outputs, &call.outputs) ||
      !ParametersFrom(parameters, &call.parameters) || !CorrelationIdFrom(correlation_id, &call)) {
    return nullptr;
  }
  const auto limit = std::chrono::nanoseconds(static_cast<int64_t>(std::max(0.0, timeout) * 1e9));
  // Starting may take locks other interpreters' threads hold.
  StatusOr<uint64_t> handle =
      WithoutGil([&] { return g_host->StartModelCall(std::move(call), limit, stream != 0); });
  if (!handle.ok()) return RaiseCallFailed(handle.status());
  return PyLong_FromUnsignedLongLong(*handle);
}

// model_load(model, config_json="", files=None): loads a model, waiting for it.
PyObject* ModelLoad(PyObject* /*self*/, PyObject* args) {
  const char *model, *config = "";
  PyObject* files = Py_None;
  if (!PyArg_ParseTuple(args, "s|sO:model_load", &model, &config, &files)) return nullptr;
  ModelLoadRequest load{model, config, {}};
  if (files != Py_None) {
    if (!PyDict_Check(files)) {
      PyErr_SetString(PyExc_TypeError, "files must be a dict: path -> bytes");
      return nullptr;
    }
    PyObject *path, *contents;
    for (Py_ssize_t at = 0; PyDict_Next(files, &at, &path, &contents);) {
      const char* name = PyUnicode_Check(path) ? PyUnicode_AsUTF8(path) : nullptr;
      if (name == nullptr || !PyBytes_Check(contents)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "files must map str to bytes");
        return nullptr;
      }
      load.files[name] =
          std::string(PyBytes_AS_STRING(contents), static_cast<size_t>(PyBytes_GET_SIZE(contents)));
    }
  }
  Status loaded = WithoutGil([&] { return g_host->LoadModel(std::move(load)); });
  if (!loaded.ok()) return RaiseCallFailed(loaded);
  Py_RETURN_NONE;
}

// model_unload(model, unload_dependents=False): asks for the model's unload
// (it drains on its own). chorus unloads the model named only.
PyObject* ModelUnload(PyObject* /*self*/, PyObject* args) {
  const char* model;
  int dependents = 0;
  if (!PyArg_ParseTuple(args, "s|p:model_unload", &model, &dependents)) return nullptr;
  if (dependents != 0) {
    return RaiseCallFailed(UnimplementedError(
        "unload_dependents is not served: unload the models an ensemble uses by name"));
  }
  Status asked = WithoutGil([&] { return g_host->UnloadModel(model); });
  if (!asked.ok()) return RaiseCallFailed(asked);
  Py_RETURN_NONE;
}

// model_ready(model, version="") -> bool
PyObject* ModelReady(PyObject* /*self*/, PyObject* args) {
  const char *model, *version = "";
  if (!PyArg_ParseTuple(args, "s|s:model_ready", &model, &version)) return nullptr;
  StatusOr<bool> ready = WithoutGil([&] { return g_host->ModelReady(model, version); });
  if (!ready.ok()) return RaiseCallFailed(ready.status());
  return PyBool_FromLong(*ready);
}

// log(level, message): to the server's log (0 info, 1 warning, 2 error, 3 verbose).
PyObject* LogLine(PyObject* /*self*/, PyObject* args) {
  int level;
  const char* message;
  if (!PyArg_ParseTuple(args, "is:log", &level, &message)) return nullptr;
  g_host->LogLine(level, message);
  Py_RETURN_NONE;
}

// `values` as a dict name -> tensor (or string tensor); nullptr with an exception set.
PyObject* NamedValuesToPython(const NamedValues& values) {
  PyObject* dict = PyDict_New();
  for (const auto& [name, value] : values) {
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

// `parameters` as a dict name -> bool, int, float or str.
PyObject* ParametersToPython(const Parameters& parameters) {
  PyObject* dict = PyDict_New();
  for (const auto& entry : parameters) {
    PyObject* value = dict == nullptr ? nullptr
                                      : std::visit(
                                            [](const auto& v) -> PyObject* {
                                              using T = std::decay_t<decltype(v)>;
                                              if constexpr (std::is_same_v<T, bool>)
                                                return PyBool_FromLong(v);
                                              if constexpr (std::is_same_v<T, int64_t>)
                                                return PyLong_FromLongLong(v);
                                              if constexpr (std::is_same_v<T, uint64_t>)
                                                return PyLong_FromUnsignedLongLong(v);
                                              if constexpr (std::is_same_v<T, double>)
                                                return PyFloat_FromDouble(v);
                                              if constexpr (std::is_same_v<T, std::string>) {
                                                return PyUnicode_DecodeUTF8(
                                                    v.data(), static_cast<Py_ssize_t>(v.size()),
                                                    "surrogateescape");
                                              }
                                            },
                                            entry.second);
    if (value == nullptr || PyDict_SetItemString(dict, entry.first.c_str(), value) < 0) {
      Py_XDECREF(value);
      Py_XDECREF(dict);
      return nullptr;
    }
    Py_DECREF(value);
  }
  return dict;
}

// (outputs, parameters, error, final): error None, or (message, code name)
// for an error response (then outputs is None); final: the call's last.
PyObject* DetailedResponse(const CallResponse& response) {
  PyObject* parameters = ParametersToPython(response.parameters);
  if (parameters == nullptr) return nullptr;
  PyObject* final = PyBool_FromLong(response.final);
  if (!response.error.ok()) {
    return Py_BuildValue("(ON(ss)N)", Py_None, parameters, response.error.message().c_str(),
                         StatusCodeName(response.error.code()), final);
  }
  PyObject* outputs = NamedValuesToPython(response.outputs);
  if (outputs == nullptr) {
    Py_DECREF(parameters);
    Py_DECREF(final);
    return nullptr;
  }
  return Py_BuildValue("(NNON)", outputs, parameters, Py_None, final);
}

// model_call_next(handle, detailed=False) -> the call's next outputs {name:
// tensor} (an error response raised), or with `detailed` (outputs,
// parameters, error, final); None at its end.
PyObject* ModelCallNext(PyObject* /*self*/, PyObject* args) {
  unsigned long long handle;
  int detailed = 0;
  if (!PyArg_ParseTuple(args, "K|p:model_call_next", &handle, &detailed)) return nullptr;
  StatusOr<std::optional<CallResponse>> next =
      WithoutGil([&] { return g_host->NextModelResponse(handle); });
  if (!next.ok()) return RaiseCallFailed(next.status());
  if (!next->has_value()) Py_RETURN_NONE;
  const CallResponse& response = **next;
  if (detailed) return DetailedResponse(response);
  if (!response.error.ok()) return RaiseCallFailed(response.error);
  return NamedValuesToPython(response.outputs);
}

PyObject* ModelCallEnd(PyObject* /*self*/, PyObject* arg) {
  const uint64_t handle = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return nullptr;
  g_host->EndModelCall(handle);
  Py_RETURN_NONE;
}

std::atomic<void*> g_autograd_engine{nullptr};

PyObject* BeginExclusive(PyObject* /*self*/, PyObject* /*unused*/) {
  WithoutGil([] { g_host->BeginExclusive(); });  // may wait for another interpreter
  Py_RETURN_NONE;
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
    {"model_call_start",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(ModelCallStart)),
     METH_VARARGS | METH_KEYWORDS,
     "model_call_start(model, inputs, version='', outputs=None, timeout=0.0, stream=False, "
     "wait=True, *, parameters=None, request_id='', correlation_id=0, flags=0) -> handle: call "
     "a served model (chorus.serving, Triton's BLS); wait=False: never on this thread"},
    {"model_load", ModelLoad, METH_VARARGS,
     "model_load(model, config_json='', files=None): load a model (Triton's load_model)"},
    {"model_unload", ModelUnload, METH_VARARGS,
     "model_unload(model, unload_dependents=False): ask for a model's unload"},
    {"model_ready", ModelReady, METH_VARARGS,
     "model_ready(model, version='') -> whether it serves (raises for an unknown model)"},
    {"log", LogLine, METH_VARARGS,
     "log(level, message): to the server's log (0 info, 1 warning, 2 error, 3 verbose)"},
    {"model_call_next", ModelCallNext, METH_VARARGS,
     "model_call_next(handle, detailed=False) -> the call's next outputs {name: tensor}, or "
     "with detailed (outputs, parameters, error, final); None at its end"},
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
      PyModule_AddIntConstant(module, "index", g_index) < 0 || !AddHostObjectTypes(module)) {
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
