// The process-wide table of live interpreters, by library slot, and which one
// the calling thread works in. libtorch is one per process and calls back into
// "the" Python interpreter through process-wide hooks (the default autograd
// engine, the PyInterpreter of torch 2.x); the routers behind those hooks use
// this table to find the right interpreter. Lookups are lock-free: they run on
// every backward pass and, with torch 2.x, on C++ copies of Python-wrapped
// tensors.
#ifndef CHORUS_INTERPRETER_INTERPRETER_REGISTRY_H_
#define CHORUS_INTERPRETER_INTERPRETER_REGISTRY_H_

namespace chorus {
namespace pyside {
class PySide;
}  // namespace pyside

namespace registry {

// Slots at or beyond this are not routed (a process creating this many
// interpreters over its life is not a use chorus supports).
inline constexpr int kMaxSlots = 4096;

// Makes `side` (library slot `slot`, started) a routing target. Any thread.
void Add(int slot, pyside::PySide* side);
// Stops routing to `slot`; calls for its objects become no-ops. Call before
// the interpreter is finalized. Any thread.
void Remove(int slot);
// The live interpreter in `slot`, or nullptr.
pyside::PySide* Get(int slot);

// The slot the calling thread works in: its innermost ThreadScope, else an
// interpreter whose Python thread it is (or that it has a session with), else -1.
int CurrentSlot();

// The slot whose interpreter made the Python object at `object` (a PyObject*),
// found by its type's metatype, or -1 (unknown or finalized).
int OwnerOf(const void* object);

// Marks the calling thread as working in `slot` until destroyed (sessions,
// Python kernels called from C++); when the innermost slot changes, so does
// the thread's torch state that holds Python objects (torch_thread_state.h).
// Nests; not copyable; one thread.
class ThreadScope {
 public:
  explicit ThreadScope(int slot);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int slot_;
};
// The same as two calls, for code that cannot hold a scope object.
void EnterSlot(int slot);
void LeaveSlot(int slot);

}  // namespace registry
}  // namespace chorus

#endif  // CHORUS_INTERPRETER_INTERPRETER_REGISTRY_H_
