// The boundary between the host (no Python headers) and the Python side of one
// interpreter (interpreter/pyside, the only code that includes Python.h).
//
// Each interpreter loads its own copy of libchorus_pyside.so, whose single
// exported symbol, chorus_pyside_create(), returns a PySide. Everything the host
// does with Python goes through this abstract interface; everything the Python
// side needs from the host (preparing extension copies, the process-wide
// registration table) goes through HostServices. Both sides are built together,
// so the ABI check is a plain version number.
#ifndef CHORUS_INTERPRETER_PYSIDE_API_H_
#define CHORUS_INTERPRETER_PYSIDE_API_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/interpreter/model_calls.h"

namespace at {
class Tensor;
}  // namespace at
namespace c10 {
struct IValue;
class OperatorHandle;
class DispatchKeySet;
}  // namespace c10

namespace chorus {
class HostObject;
}  // namespace chorus

namespace chorus::pyside {

inline constexpr uint32_t kAbiVersion = 7;
inline constexpr char kEntryPoint[] = "chorus_pyside_create";

// A strong reference to a Python object of one interpreter (really a PyObject*).
struct PyRef;

using Kwargs = std::vector<std::pair<std::string, c10::IValue>>;

// Services the host provides to every interpreter's Python side. Thread-safe.
class HostServices {
 public:
  virtual ~HostServices() = default;
  // A slot names one loaded set of library copies; it is unique in the
  // process (a second manager gets new slots, since a finalized interpreter's
  // libraries cannot be initialized again).
  //
  // Prepares interpreter `slot`'s private copy of the C extension at `path`
  // and loads it in that interpreter's lookup scope; returns the copy's path.
  virtual StatusOr<std::string> PrepareExtension(int slot, const std::string& path) = 0;
  // Whether the shared library at `path` links libpython or torch's Python
  // bindings (so each interpreter needs its own copy); false if unreadable.
  virtual bool ReferencesPython(const std::string& path) = 0;
  // Claims a process-wide dispatcher registration `key` (a namespace, an op
  // definition, a kernel) for `slot`. true: `slot` owns it and must make it,
  // then call CompleteRegistration. false: another slot made it; skip it.
  // While another slot is still making it, waits (so a skipped registration
  // is always in place on return). Errors: that wait timed out.
  virtual StatusOr<bool> ClaimRegistration(const std::string& key, int slot) = 0;
  // Reports that the owner made registration `key` (or failed to, which
  // frees the key for the next claimant).
  virtual void CompleteRegistration(const std::string& key, int slot, bool made) = 0;
  // Records `slot`'s own Python function (a strong PyObject* reference the
  // slot keeps) for kernel registration `key`, which another slot made: calls
  // made in `slot` then run it (RunKernelFunction) instead of crossing.
  virtual void AddKernelFunction(const std::string& key, int slot, void* fn, bool with_keyset) = 0;
  // Runs `slot`'s function for kernel registration `key` if it has one
  // (PySide::RunKernel); false if none. Throws c10::Error from the kernel.
  virtual bool RunKernelFunction(const std::string& key, int slot, const c10::OperatorHandle& op,
                                 c10::DispatchKeySet keys, std::vector<c10::IValue>* stack) = 0;
  // Bracket a section that one interpreter at a time may run, process-wide
  // (torch._C's initialization, inductor's kernel loading). Begin waits; call
  // it without holding a GIL. Not re-entrant.
  virtual void BeginExclusive() = 0;
  virtual void EndExclusive() = 0;
  // Right after an interpreter's torch._C initialized (which makes its own
  // copy of torch's Python autograd engine libtorch's process-wide default,
  // inside an exclusive section): returns that engine (a
  // torch::autograd::Engine*) and points the default back at chorus' router,
  // which picks the engine of the interpreter the calling thread works in.
  virtual void* TakeAutogradEngine() = 0;
  // The tensor an interpreter receives for `tensor` crossing the boundary
  // (either way): a new TensorImpl over the same memory, sharing the version
  // counter, with no autograd history, and (torch 2.x) its own StorageImpl,
  // so that no interpreter ever reaches another's Python objects through it.
  virtual at::Tensor CrossingAlias(const at::Tensor& tensor) = 0;
  // The HostObject `value` carries (host_object.h), or nullptr: the host's
  // type check, since this library's copies cannot compare its types.
  virtual HostObject* AsHostObject(const c10::IValue& value) = 0;
  // Marks the calling thread as working in `slot` (a Python kernel called
  // from C++ on a thread that may be in another interpreter's session), until
  // the matching LeaveSlot.
  virtual void EnterSlot(int slot) = 0;
  virtual void LeaveSlot(int slot) = 0;
  // The slot the calling thread works in now, or -1.
  virtual int CurrentSlot() = 0;
  // Model code calls a served model (chorus.serving; model_calls.h): starts
  // `call` with the calling thread's context, its deadline capped `timeout`
  // from now (0: none); `stream` asks for each response. Returns its handle.
  virtual StatusOr<uint64_t> StartModelCall(ModelCall call, std::chrono::nanoseconds timeout,
                                            bool stream) = 0;
  // Waits for the call's next response (call it without holding a GIL):
  // its outputs, nullopt at its end, or its error.
  virtual StatusOr<std::optional<CallResponse>> NextModelResponse(uint64_t handle) = 0;
  // Forgets the call, stopping it if it still runs.
  virtual void EndModelCall(uint64_t handle) = 0;
  // Model code's repository calls (Triton's pb_utils.load_model, ...):
  // a load is waited for (call it without holding a GIL), an unload only
  // asked for; readiness NOT_FOUND for a model the repository lacks.
  virtual Status LoadModel(ModelLoadRequest load) = 0;
  virtual Status UnloadModel(const std::string& model) = 0;
  virtual StatusOr<bool> ModelReady(const std::string& model, const std::string& version) = 0;
  // Model code's log line (Triton's pb_utils.Logger): `level` 0 info,
  // 1 warning, 2 error, 3 verbose; to the server's log.
  virtual void LogLine(int level, const std::string& message) = 0;
  // Model code is ending the process (os._exit(status)): writes the crash
  // report's account of the calling thread (what it runs, its interpreter
  // and Python stack) to the log first.
  virtual void ReportExit(int status) = 0;
};

struct StartOptions {
  int slot = 0;              // process-unique library slot (HostServices calls)
  int index = 0;             // the interpreter's index in its manager (chorus.interpreter_index())
  std::string program_name;  // the pinned Python; Python derives sys.prefix from it
  std::string chorus_python_dir;  // holds the `chorus` Python package
  std::vector<std::string> preload_modules;
  bool load_gpu_packages = false;  // whether triton and the CUDA bindings may load (GPU hosts)
  bool defer_imports = true;       // chorus/_deferred_imports.py
  HostServices* host = nullptr;    // outlives the PySide
};

// One interpreter. Methods marked "GIL" require the calling thread to hold
// this interpreter's GIL (AcquireGil); the others say what they need.
class PySide {
 public:
  virtual ~PySide() = default;

  // Initializes the interpreter, installs the chorus import hooks and imports
  // `preload_modules`; returns with the GIL released. Once, on the thread
  // that will call Shutdown (CPython's main thread for it: HomeThread).
  virtual Status Start(const StartOptions& options) = 0;
  // Finalizes the interpreter. No thread may hold its GIL; on Start's thread.
  virtual void Shutdown() = 0;

  // Makes the calling thread hold this interpreter's GIL (re-entrant).
  virtual void AcquireGil() = 0;
  // Undoes one AcquireGil on the same thread.
  virtual void ReleaseGil() = 0;
  // GIL. Releases it however deeply AcquireGil nests on this thread, for a
  // wait on another thread of this interpreter; returns what ResumeGil takes
  // back on the same thread (use GilSuspension).
  virtual void* SuspendGil() = 0;
  virtual void ResumeGil(void* thread_state) = 0;

  // GIL. `import module; return module`.
  virtual StatusOr<PyRef*> Import(const std::string& module) = 0;
  // GIL. getattr(obj, name).
  virtual StatusOr<PyRef*> GetAttr(PyRef* obj, const std::string& name) = 0;
  // GIL. callable(*args, **kwargs), arguments converted from IValues. A call
  // carrying `call_token` != 0 can be stopped by Interrupt(call_token).
  virtual StatusOr<PyRef*> Call(PyRef* callable, const std::vector<c10::IValue>& args,
                                const Kwargs& kwargs, uint64_t call_token) = 0;
  // GIL. callable(*args) with Python objects of this interpreter as arguments.
  virtual StatusOr<PyRef*> CallObjects(PyRef* callable, const std::vector<PyRef*>& args) = 0;
  // GIL. Runs `code` in the namespace of module __main__.
  virtual Status Exec(const std::string& code) = 0;
  // GIL. Evaluates `expression` in the namespace of module __main__.
  virtual StatusOr<PyRef*> Eval(const std::string& expression) = 0;
  // GIL. Python -> IValue; tensors come back as aliases (same storage).
  virtual StatusOr<c10::IValue> ToIValue(PyRef* obj) = 0;
  // GIL. IValue -> Python; tensors go in as aliases (same storage).
  virtual StatusOr<PyRef*> FromIValue(const c10::IValue& value) = 0;
  // GIL. repr(obj).
  virtual StatusOr<std::string> Repr(PyRef* obj) = 0;
  // GIL. Reference counting.
  virtual void IncRef(PyRef* obj) = 0;
  virtual void DecRef(PyRef* obj) = 0;

  // Any thread: whether the calling thread is attached to this interpreter
  // (has a Python thread state in it: inside a session, or a Python thread
  // of it), GIL held or not. torch releases the GIL around its ops.
  virtual bool ThreadAttached() = 0;
  // Any thread: this interpreter's `type` object (every object's type's
  // metatype ends there), which identifies the interpreter of a PyObject.
  virtual const void* TypeType() = 0;
  // Any thread: this interpreter's torch PyInterpreter (its copy of
  // torch::getPyInterpreter(), a c10::impl::PyInterpreter*).
  virtual void* TorchPyInterpreter() = 0;
  // GIL not held. Runs this interpreter's Python kernel function `fn` (from
  // AddKernelFunction) for a call made in this interpreter. Throws c10::Error.
  virtual void RunKernel(void* fn, bool with_keyset, const c10::OperatorHandle& op,
                         c10::DispatchKeySet keys, std::vector<c10::IValue>* stack) = 0;
  // GIL. This interpreter's torch.ops object for operator `op`
  // (torch::detail::getTorchApiFunction's answer for this interpreter), a
  // borrowed PyObject* kept for the interpreter's life. Throws c10::Error.
  virtual void* TorchApiFunction(const c10::OperatorHandle& op) = 0;
  // Any thread: this interpreter's autograd engine (its copy of torch's
  // PythonEngine, as a torch::autograd::Engine*).
  virtual void* AutogradEngine() = 0;

  // Async-signal-safe (a crash report): writes "interpreter <index>" and the
  // calling thread's Python stack in this interpreter to `fd`, as Python's
  // faulthandler does.
  virtual void DumpTraceback(int fd) = 0;

  // Any thread, GIL not held. Raises chorus.DeadlineExceeded inside the call
  // tagged `call_token` if it is still running; returns whether it was.
  virtual bool Interrupt(uint64_t call_token) = 0;
};

}  // namespace chorus::pyside

extern "C" {
// The Python side's one exported symbol. Returns nullptr on ABI mismatch.
// The caller owns the result.
chorus::pyside::PySide* chorus_pyside_create(uint32_t abi_version);
}

#endif  // CHORUS_INTERPRETER_PYSIDE_API_H_
