// This interpreter's GIL for a scope, taken only when this thread does not
// hold it already (GilScope), or let go of for one (GilRelease).
#ifndef CHORUS_INTERPRETER_PYSIDE_GIL_SCOPE_H_
#define CHORUS_INTERPRETER_PYSIDE_GIL_SCOPE_H_

#include <Python.h>
#include <pythread.h>

namespace chorus::pyside {

// For code that may run nested in this interpreter's own Python (a kernel
// it registered, run or released while it finalizes). It asks the thread
// state, not only PyGILState: from CPython 3.12, a thread that deletes
// another thread's state loses its own gilstate binding, and a plain
// PyGILState_Ensure would then wait for the GIL its own thread holds.
// Not copyable; destroy on the thread that made it.
class GilScope {
 public:
  GilScope() : held_(ThisThreadHoldsTheGil()) {
    if (!held_) state_ = PyGILState_Ensure();
  }
  ~GilScope() {
    if (!held_) PyGILState_Release(state_);
  }
  GilScope(const GilScope&) = delete;
  GilScope& operator=(const GilScope&) = delete;

 private:
  static bool ThisThreadHoldsTheGil() {
#if PY_VERSION_HEX >= 0x030D0000
    PyThreadState* current = PyThreadState_GetUnchecked();
#else
    PyThreadState* current = _PyThreadState_UncheckedGet();
#endif
    // 3.11 keeps one current state per interpreter, whichever thread holds
    // the GIL; from 3.12 it is per thread.
    return current != nullptr && current->thread_id == PyThread_get_thread_ident();
  }

  const bool held_;
  PyGILState_STATE state_{};
};

// Lets go of this interpreter's GIL, which the calling thread holds, for a
// scope that waits or does I/O without touching Python; takes it back at the
// end. Not copyable; destroy on the thread that made it.
class GilRelease {
 public:
  GilRelease() : state_(PyEval_SaveThread()) {}
  ~GilRelease() { PyEval_RestoreThread(state_); }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* const state_;
};

// `call()` with the GIL let go: a host call that may wait on other threads
// or interpreters.
template <typename Call>
auto WithoutGil(Call&& call) {
  GilRelease released;
  return call();
}

}  // namespace chorus::pyside

#endif  // CHORUS_INTERPRETER_PYSIDE_GIL_SCOPE_H_
