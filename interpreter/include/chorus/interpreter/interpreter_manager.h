// interpreter/: the N interpreters of a process and who runs on them. The
// manager (this header) creates and owns the interpreters, loads each one's
// copy of libpython and torch's bindings (libcache/, pyside/) and hands out
// sessions; InterpreterPlacement (placement.h) decides which interpreters
// training jobs, generation engines and model calls get.
//
// N isolated CPython interpreters in one process, all sharing one libtorch.
//
//   chorus::InterpreterManagerOptions options;
//   options.num_interpreters = 4;
//   auto manager = chorus::InterpreterManager::Create(options).value();
//   {
//     chorus::InterpreterSession session = manager->AcquireOne();  // holds one GIL
//     auto relu = session.Global("torch.nn.functional", "relu").value();
//     c10::IValue out = relu.Call({torch::randn({3})}).value().ToIValue().value();
//   }
//   chorus::ReplicatedObject model = manager->Replicate(
//       [](chorus::InterpreterSession& s) { return s.Eval("make_model()"); });
//   c10::IValue y = model.Call({x}).value();   // any thread, any free interpreter
//
// Threads: an InterpreterManager is thread-safe. An InterpreterSession and the
// Objects made in it belong to the thread that acquired the session. A
// ReplicatedObject is thread-safe.
//
// Errors: every fallible call returns Status/StatusOr; a Python exception
// becomes a Status whose python_error() has its type, message and traceback,
// and the interpreter stays usable.
#ifndef CHORUS_INTERPRETER_INTERPRETER_MANAGER_H_
#define CHORUS_INTERPRETER_INTERPRETER_MANAGER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/interpreter/model_calls.h"

namespace c10 {
struct IValue;
}  // namespace c10

namespace chorus {

namespace internal {
struct Slot;
struct Replicated;
}  // namespace internal
namespace pyside {
class PySide;
struct PyRef;
}  // namespace pyside

class InterpreterSession;
class Object;
class ReplicatedObject;

// Keyword arguments, in order.
using Kwargs = std::vector<std::pair<std::string, c10::IValue>>;

struct CallOptions {
  // A call still running at the deadline is interrupted: chorus.DeadlineExceeded
  // is raised inside it (at the next Python bytecode), the call returns
  // DEADLINE_EXCEEDED and the interpreter serves the next call. Code blocked
  // inside C (a sleep, a long kernel) is interrupted when it returns to Python.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // >= 0: a ReplicatedObject (or model) call runs on this interpreter, waiting
  // for its GIL, where state kept there lives (a sequence's); -1: an idle one.
  int interpreter = -1;
};

struct InterpreterManagerOptions {
  // Interpreters to create; 0 means one per hardware thread.
  int num_interpreters = 0;
  // Where per-interpreter library copies are kept; "" means
  // $XDG_CACHE_HOME/chorus, else ~/.cache/chorus.
  std::string cache_dir;
  // libtorch's intra-op thread pool is one per process, shared by every
  // interpreter. 0 sizes it to hardware threads / num_interpreters (at least 1)
  // so that parallel interpreters do not oversubscribe the cores; > 0 sets that
  // many threads; -1 leaves libtorch's setting alone.
  int intra_op_threads = 0;
  // Modules every interpreter imports while it is created (in parallel).
  std::vector<std::string> preload_modules = {"torch"};
  // Whether parts of torch a serving interpreter rarely uses (torch._dynamo,
  // torch.distributions, torch.utils.data...) are imported on first use, not
  // with torch: less memory per interpreter (python/chorus/_deferred_imports.py).
  bool defer_imports = true;
};

// Owns the interpreters. Create() returns the implementation (leveldb-style
// interface/impl split); destroying it finalizes every interpreter.
class InterpreterManager {
 public:
  // Creates the interpreters, several at a time. Errors: the Python side
  // cannot be loaded or initialized, a preload module fails to import (the
  // status carries the Python error), the cache directory is not writable.
  static StatusOr<std::unique_ptr<InterpreterManager>> Create(
      const InterpreterManagerOptions& options = {});

  // Precondition: no InterpreterSession is alive. Finalizes every interpreter;
  // ReplicatedObjects still alive become inert (their calls fail).
  virtual ~InterpreterManager() = default;
  InterpreterManager(const InterpreterManager&) = delete;
  InterpreterManager& operator=(const InterpreterManager&) = delete;

  // Number of interpreters.
  virtual int size() const = 0;

  // A session on an idle interpreter, claimed without locks; if all are busy,
  // on the least busy one (its GIL then serializes the callers). Reserved
  // interpreters are chosen only when all are reserved. Never fails.
  virtual InterpreterSession AcquireOne() = 0;

  // A session on interpreter `index`. Precondition: 0 <= index < size().
  virtual InterpreterSession Acquire(int index) = 0;

  // Marks interpreter `index` reserved: AcquireOne, and so ReplicatedObject
  // calls, avoid it while any interpreter is not reserved. Sessions already
  // open are unaffected. Any thread. InterpreterPlacement (placement.h) calls
  // it for the interpreters training jobs hold; servers place work through it.
  virtual void SetReserved(int index, bool reserved) = 0;

  // An object that exists once per interpreter, made by `factory` the first
  // time it is needed there. `factory` runs inside a session on that
  // interpreter and may run concurrently on different interpreters, but once
  // per interpreter: a caller that finds it running there waits (its GIL
  // released), and a factory that fails leaves the next caller to try again.
  virtual ReplicatedObject Replicate(
      std::function<StatusOr<Object>(InterpreterSession&)> factory) = 0;

  // Where model code's calls to served models (chorus.serving.infer) go;
  // nullptr (the default) fails them UNAVAILABLE. Any thread; calls already
  // started keep the handler they got.
  virtual void SetModelCallHandler(std::shared_ptr<ModelCallHandler> handler) = 0;

  // Per interpreter: how long sessions have held it, in total, and how many
  // sessions are open on it now. Any thread; a snapshot.
  struct InterpreterStats {
    double busy_seconds = 0;
    int sessions = 0;
  };
  virtual std::vector<InterpreterStats> Stats() const = 0;

 protected:
  InterpreterManager() = default;
};

// Holds one interpreter's GIL on the calling thread for its lifetime: an RAII
// scope, not copyable. Create and destroy it on the same thread; moving it to
// another variable on that thread is allowed. Sessions nest (re-entrant), also
// across interpreters (each has its own GIL).
class InterpreterSession {
 public:
  InterpreterSession(InterpreterSession&& other) noexcept;
  InterpreterSession& operator=(InterpreterSession&&) = delete;
  InterpreterSession(const InterpreterSession&) = delete;
  InterpreterSession& operator=(const InterpreterSession&) = delete;
  // Releases the GIL. Objects from this session must be destroyed first.
  ~InterpreterSession();

  // Which interpreter this session is on.
  int index() const;

  // `import module` (dotted names allowed).
  StatusOr<Object> Import(std::string_view module);
  // `module.name`, importing the module if needed.
  StatusOr<Object> Global(std::string_view module, std::string_view name);
  // Runs statements in this interpreter's __main__ namespace.
  Status Exec(std::string_view code);
  // Evaluates an expression in this interpreter's __main__ namespace.
  StatusOr<Object> Eval(std::string_view expression);
  // The Python equivalent of `value` (tensors cross as aliases, no copy).
  StatusOr<Object> FromIValue(const c10::IValue& value);

 private:
  friend class InterpreterManagerImpl;
  friend class Object;
  friend class ReplicatedObject;
  friend struct internal::Replicated;
  // Precondition: the caller counted itself in slot->users.
  explicit InterpreterSession(internal::Slot* slot);
  Object Wrap(pyside::PyRef* ref);

  internal::Slot* slot_;
  std::chrono::steady_clock::time_point opened_;
};

// A strong reference to a Python object in one interpreter. Use it only on the
// thread of the session that made it, while that session is alive.
class Object {
 public:
  Object() = default;
  Object(const Object& other);
  Object& operator=(const Object& other);
  Object(Object&& other) noexcept;
  Object& operator=(Object&& other) noexcept;
  ~Object();

  // False for a default-constructed or moved-from Object.
  bool valid() const { return ref_ != nullptr; }

  // self(*args, **kwargs), arguments converted from IValues. (Overloads, not
  // default arguments: a defaulted vector of the incomplete IValue does not
  // compile under clang in C++20.)
  StatusOr<Object> Call(const std::vector<c10::IValue>& args, const Kwargs& kwargs,
                        const CallOptions& options = {}) const;
  StatusOr<Object> Call(const std::vector<c10::IValue>& args) const;
  StatusOr<Object> Call() const;
  // self(*args) with Python objects (of the same interpreter) as arguments.
  StatusOr<Object> CallObjects(const std::vector<Object>& args) const;
  // getattr(self, name).
  StatusOr<Object> Attr(std::string_view name) const;
  // The C++ value: None, bool, int, float, str, Tensor (an alias, no copy),
  // list, tuple, dict; other types are an INVALID_ARGUMENT-like INTERNAL error.
  StatusOr<c10::IValue> ToIValue() const;
  // repr(self).
  StatusOr<std::string> Repr() const;

 private:
  friend class InterpreterSession;
  friend class ReplicatedObject;
  Object(internal::Slot* slot, pyside::PyRef* ref) : slot_(slot), ref_(ref) {}
  void Reset();

  internal::Slot* slot_ = nullptr;
  pyside::PyRef* ref_ = nullptr;
};

// One Python object per interpreter, made lazily by a factory. Copies share
// the same objects. Thread-safe.
class ReplicatedObject {
 public:
  ReplicatedObject() = default;

  // Calls the object on an idle interpreter (see AcquireOne) and converts the
  // result to an IValue. Any thread.
  StatusOr<c10::IValue> Call(const std::vector<c10::IValue>& args, const Kwargs& kwargs,
                             const CallOptions& options = {}) const;
  StatusOr<c10::IValue> Call(const std::vector<c10::IValue>& args) const;
  // The object in `session`'s interpreter, made there if needed (see
  // Replicate). A factory that asks for its own object gets an error.
  StatusOr<Object> In(InterpreterSession& session) const;

 private:
  friend class InterpreterManagerImpl;
  explicit ReplicatedObject(std::shared_ptr<internal::Replicated> rep) : rep_(std::move(rep)) {}

  std::shared_ptr<internal::Replicated> rep_;
};

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_INTERPRETER_MANAGER_H_
