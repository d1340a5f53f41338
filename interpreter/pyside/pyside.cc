// The Python side of one interpreter: implements pyside::PySide on CPython's C
// API. This library is loaded once per interpreter (a private copy), so its
// statics and thread_locals are per-interpreter.
#include <Python.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/PyInterpreter.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "chorus/common/crash_report.h"
#include "interpreter/pyside/convert.h"
#include "interpreter/pyside/dispatch_library.h"
#include "interpreter/pyside/native_module.h"
#include "interpreter/pyside/python_error.h"
#include "interpreter/src/pyside_api.h"

#if PY_VERSION_HEX < 0x030D0000
// CPython's async-signal-safe traceback writer (faulthandler's), exported by
// libpython up to 3.12 but declared only in its internal headers.
extern "C" void _Py_DumpTraceback(int fd, PyThreadState* tstate);
#endif

namespace chorus::pyside {
namespace {

PyObject* Raw(PyRef* ref) { return reinterpret_cast<PyObject*>(ref); }
PyRef* Ref(PyObject* obj) { return reinterpret_cast<PyRef*>(obj); }

// A new reference on success, the pending Python exception as a Status otherwise.
StatusOr<PyRef*> Result(PyObject* obj) {
  if (obj == nullptr) return FetchPythonError();
  return Ref(obj);
}

// Nested AcquireGil() calls on this thread, innermost last.
thread_local std::vector<PyGILState_STATE> tls_gil_states;
// Whether this thread keeps a thread state in this interpreter between
// sessions (see AcquireGil).
thread_local bool tls_retained = false;

class PySideImpl final : public PySide {
 public:
  Status Start(const StartOptions& options) override;
  void Shutdown() override;

  // A thread's first session makes it a Python thread state and keeps it
  // (one extra PyGILState reference), so later sessions on that thread only
  // take the GIL: no thread state is created and destroyed per session.
  // Finalization deletes the retained states.
  void AcquireGil() override {
    if (!tls_retained) {
      PyGILState_Ensure();
      PyEval_SaveThread();
      tls_retained = true;
    }
    tls_gil_states.push_back(PyGILState_Ensure());
  }
  void ReleaseGil() override {
    PyGILState_STATE state = tls_gil_states.back();
    tls_gil_states.pop_back();
    PyGILState_Release(state);
  }
  void* SuspendGil() override { return PyEval_SaveThread(); }
  void ResumeGil(void* thread_state) override {
    PyEval_RestoreThread(static_cast<PyThreadState*>(thread_state));
  }

  StatusOr<PyRef*> Import(const std::string& module) override {
    return Result(PyImport_ImportModule(module.c_str()));
  }
  StatusOr<PyRef*> GetAttr(PyRef* obj, const std::string& name) override {
    return Result(PyObject_GetAttrString(Raw(obj), name.c_str()));
  }
  StatusOr<PyRef*> Call(PyRef* callable, const std::vector<c10::IValue>& args, const Kwargs& kwargs,
                        uint64_t call_token) override;
  StatusOr<PyRef*> CallObjects(PyRef* callable, const std::vector<PyRef*>& args) override;
  Status Exec(const std::string& code) override;
  StatusOr<PyRef*> Eval(const std::string& expression) override;
  StatusOr<c10::IValue> ToIValue(PyRef* obj) override {
    c10::IValue value;
    if (!PythonToIValue(Raw(obj), &value)) return FetchPythonError();
    return value;
  }
  StatusOr<PyRef*> FromIValue(const c10::IValue& value) override {
    return Result(IValueToPython(value));
  }
  StatusOr<std::string> Repr(PyRef* obj) override;
  void IncRef(PyRef* obj) override { Py_INCREF(Raw(obj)); }
  void DecRef(PyRef* obj) override { Py_DECREF(Raw(obj)); }
  bool Interrupt(uint64_t call_token) override;
  void DumpTraceback(int fd) override;
  // In a session now, or a thread Python itself runs (not one merely keeping
  // a retained thread state between sessions).
  bool ThreadAttached() override {
    return !tls_gil_states.empty() || (!tls_retained && PyGILState_GetThisThreadState() != nullptr);
  }
  const void* TypeType() override { return &PyType_Type; }
  void* TorchPyInterpreter() override { return getPyInterpreter(); }
  void* AutogradEngine() override { return pyside::AutogradEngine(); }
  void* TorchApiFunction(const c10::OperatorHandle& op) override;
  void RunKernel(void* fn, bool with_keyset, const c10::OperatorHandle& op,
                 c10::DispatchKeySet keys, std::vector<c10::IValue>* stack) override {
    RunPythonKernel(static_cast<PyObject*>(fn), with_keyset, op, keys, stack);
  }

 private:
  struct ActiveCall {
    unsigned long thread_id;
    bool interrupted;
  };
  StatusOr<PyRef*> RunCode(const std::string& code, int mode);

  PyThreadState* start_thread_ = nullptr;  // the thread state Start() created
  int index_ = -1;                         // the interpreter's index in its manager
  // Calls that Interrupt() may stop, by token. Guarded by the GIL.
  std::unordered_map<uint64_t, ActiveCall> active_calls_;
};

// Python code run once at start-up, with the GIL held. Installs chorus' import
// hook before anything can import a C extension, then runs site (disabled in
// the config for exactly that reason) and the preloads.
constexpr char kBootstrap[] = R"(
import sys
sys.path.insert(0, _chorus_python_dir)
import chorus._bootstrap
chorus._bootstrap.install(_chorus_load_gpu_packages, _chorus_defer_imports)
del _chorus_python_dir, _chorus_load_gpu_packages, _chorus_defer_imports
)";

Status PySideImpl::Start(const StartOptions& options) {
  index_ = options.index;
  RegisterNativeModule(options.host, options.slot, options.index);
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0;  // signals belong to the host process
  config.site_import = 0;              // site runs after the import hook is in place
  config.parse_argv = 0;
  PyStatus status =
      PyConfig_SetBytesString(&config, &config.program_name, options.program_name.c_str());
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) {
    return InternalError(std::string("cannot initialize Python: ") +
                         (status.err_msg ? status.err_msg : "unknown error"));
  }

  PyObject* main_module = PyImport_AddModule("__main__");  // borrowed
  PyObject* globals = PyModule_GetDict(main_module);       // borrowed
  PyObject* dir = PyUnicode_FromString(options.chorus_python_dir.c_str());
  PyDict_SetItemString(globals, "_chorus_python_dir", dir);
  Py_XDECREF(dir);
  PyDict_SetItemString(globals, "_chorus_load_gpu_packages",
                       options.load_gpu_packages ? Py_True : Py_False);
  PyDict_SetItemString(globals, "_chorus_defer_imports",
                       options.defer_imports ? Py_True : Py_False);
  Status started = Exec(kBootstrap);
  for (size_t i = 0; started.ok() && i < options.preload_modules.size(); ++i) {
    StatusOr<PyRef*> module = Import(options.preload_modules[i]);
    if (module.ok()) {
      DecRef(*module);
    } else {
      started = module.status().Annotate("preloading " + options.preload_modules[i]);
    }
  }
  start_thread_ = PyEval_SaveThread();
  return started;
}

void PySideImpl::Shutdown() {
  if (start_thread_ == nullptr) return;
  // On the start-up thread (the contract): this takes back the start-up thread
  // state, the one every CPython version finalizes on.
  PyGILState_Ensure();
  start_thread_ = nullptr;
  // Registrations this interpreter made must not outlive it: the dispatcher
  // would call into a finalized interpreter.
  CloseAllLibraries();
  Py_FinalizeEx();
}

StatusOr<PyRef*> PySideImpl::Call(PyRef* callable, const std::vector<c10::IValue>& args,
                                  const Kwargs& kwargs, uint64_t call_token) {
  PyObject* py_args = PyTuple_New(static_cast<Py_ssize_t>(args.size()));
  PyObject* py_kwargs = kwargs.empty() ? nullptr : PyDict_New();
  bool ok = py_args != nullptr && (kwargs.empty() || py_kwargs != nullptr);
  for (size_t i = 0; ok && i < args.size(); ++i) {
    PyObject* arg = IValueToPython(args[i]);
    ok = arg != nullptr;
    if (ok) PyTuple_SET_ITEM(py_args, static_cast<Py_ssize_t>(i), arg);
  }
  for (size_t i = 0; ok && i < kwargs.size(); ++i) {
    PyObject* value = IValueToPython(kwargs[i].second);
    ok = value != nullptr && PyDict_SetItemString(py_kwargs, kwargs[i].first.c_str(), value) == 0;
    Py_XDECREF(value);
  }
  PyObject* result = nullptr;
  if (ok) {
    if (call_token != 0) active_calls_[call_token] = {PyThread_get_thread_ident(), false};
    result = PyObject_Call(Raw(callable), py_args, py_kwargs);
    if (call_token != 0) {
      ActiveCall call = active_calls_[call_token];
      active_calls_.erase(call_token);
      // An interrupt that arrived after the last bytecode ran is still pending
      // on this thread; it must not fire in the next call.
      if (call.interrupted) PyThreadState_SetAsyncExc(call.thread_id, nullptr);
    }
  }
  Py_XDECREF(py_args);
  Py_XDECREF(py_kwargs);
  return Result(result);
}

StatusOr<PyRef*> PySideImpl::CallObjects(PyRef* callable, const std::vector<PyRef*>& args) {
  PyObject* py_args = PyTuple_New(static_cast<Py_ssize_t>(args.size()));
  if (py_args == nullptr) return FetchPythonError();
  for (size_t i = 0; i < args.size(); ++i) {
    Py_INCREF(Raw(args[i]));
    PyTuple_SET_ITEM(py_args, static_cast<Py_ssize_t>(i), Raw(args[i]));
  }
  PyObject* result = PyObject_Call(Raw(callable), py_args, nullptr);
  Py_DECREF(py_args);
  return Result(result);
}

StatusOr<PyRef*> PySideImpl::RunCode(const std::string& code, int mode) {
  PyObject* globals = PyModule_GetDict(PyImport_AddModule("__main__"));  // borrowed
  return Result(PyRun_String(code.c_str(), mode, globals, globals));
}

Status PySideImpl::Exec(const std::string& code) {
  StatusOr<PyRef*> result = RunCode(code, Py_file_input);
  if (!result.ok()) return result.status();
  DecRef(*result);
  return OkStatus();
}

StatusOr<PyRef*> PySideImpl::Eval(const std::string& expression) {
  return RunCode(expression, Py_eval_input);
}

StatusOr<std::string> PySideImpl::Repr(PyRef* obj) {
  PyObject* repr = PyObject_Repr(Raw(obj));
  if (repr == nullptr) return FetchPythonError();
  const char* text = PyUnicode_AsUTF8(repr);
  std::string result = text ? text : "";
  Py_DECREF(repr);
  if (text == nullptr) return FetchPythonError();
  return result;
}

void* PySideImpl::TorchApiFunction(const c10::OperatorHandle& op) {
  // torch.ops.<ns>.<name>.<overload>, as torch finds it, once per operator.
  static auto* cache = new std::unordered_map<std::string, PyObject*>();  // GIL-guarded
  const c10::OperatorName& name = op.operator_name();
  const std::string key = name.name + "." + name.overload_name;
  auto found = cache->find(key);
  if (found != cache->end()) return found->second;
  const size_t separator = name.name.find("::");
  TORCH_CHECK(separator != std::string::npos, "operator without a namespace: ", name.name);
  PyObject* object = PyImport_ImportModule("torch.ops");
  for (const std::string& attribute :
       {name.name.substr(0, separator), name.name.substr(separator + 2),
        name.overload_name.empty() ? std::string("default") : name.overload_name}) {
    PyObject* next = object ? PyObject_GetAttrString(object, attribute.c_str()) : nullptr;
    Py_XDECREF(object);
    object = next;
  }
  if (object == nullptr) {
    std::string error = FetchPythonError().message();
    TORCH_CHECK(false, "cannot find torch.ops object for ", key, ": ", error);
  }
  cache->emplace(key, object);  // kept: torch keeps its own cached objects too
  return object;
}

#if PY_VERSION_HEX >= 0x030D0000
// An ASCII str's characters, written without allocating ("?" otherwise).
void WriteAsciiToFd(int fd, PyObject* text) {
  if (text == nullptr || !PyUnicode_Check(text) || !PyUnicode_IS_ASCII(text)) {
    WriteToFd(fd, "?");
    return;
  }
  WriteToFd(fd, static_cast<const char*>(PyUnicode_DATA(text)));
}

// 3.13 no longer exports faulthandler's writer: the innermost Python frame,
// from the public frame API, written without allocating (what a crash allows).
void DumpInnermostFrame(int fd, PyThreadState* state) {
  _PyInterpreterFrame* frame = state->current_frame;
  if (frame == nullptr) {
    WriteToFd(fd, "  (no Python frame)\n");
    return;
  }
  PyObject* code = PyUnstable_InterpreterFrame_GetCode(frame);
  WriteToFd(fd, "  File \"");
  WriteAsciiToFd(fd,
                 code != nullptr ? reinterpret_cast<PyCodeObject*>(code)->co_filename : nullptr);
  WriteToFd(fd, "\", line ");
  const int line = PyUnstable_InterpreterFrame_GetLine(frame);
  WriteDecimalToFd(fd, line < 0 ? 0 : static_cast<unsigned long long>(line));
  WriteToFd(fd, " in ");
  WriteAsciiToFd(fd, code != nullptr ? reinterpret_cast<PyCodeObject*>(code)->co_name : nullptr);
  WriteToFd(fd, " (innermost frame only on Python 3.13)\n");
  Py_XDECREF(code);  // the frame holds it too: nothing is freed here
}
#endif

void PySideImpl::DumpTraceback(int fd) {
  // Only signal-safe writers and Python's own dumper: this runs in a crash.
  WriteToFd(fd, "  interpreter ");
  WriteDecimalToFd(fd, index_ < 0 ? 0 : static_cast<unsigned long long>(index_));
  WriteToFd(fd, "\n");
  PyThreadState* state = PyGILState_GetThisThreadState();
  if (state == nullptr) {
    WriteToFd(fd, "  (this thread has no Python stack here)\n");
    return;
  }
#if PY_VERSION_HEX < 0x030D0000
  _Py_DumpTraceback(fd, state);
#else
  DumpInnermostFrame(fd, state);
#endif
}

bool PySideImpl::Interrupt(uint64_t call_token) {
  PyGILState_STATE gil = PyGILState_Ensure();
  bool hit = false;
  auto it = active_calls_.find(call_token);
  if (it != active_calls_.end() && !it->second.interrupted) {
    hit = PyThreadState_SetAsyncExc(it->second.thread_id, DeadlineExceededType()) == 1;
    it->second.interrupted = hit;
  }
  PyGILState_Release(gil);
  return hit;
}

}  // namespace
}  // namespace chorus::pyside

extern "C" __attribute__((visibility("default"))) chorus::pyside::PySide* chorus_pyside_create(
    uint32_t abi_version) {
  if (abi_version != chorus::pyside::kAbiVersion) return nullptr;
  return new chorus::pyside::PySideImpl();
}
