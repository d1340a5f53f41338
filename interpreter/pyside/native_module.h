// `_chorus`: the built-in module every interpreter gets before it starts. It is
// what chorus' own Python code (the import hook, the torch shims) calls into.
#ifndef CHORUS_INTERPRETER_PYSIDE_NATIVE_MODULE_H_
#define CHORUS_INTERPRETER_PYSIDE_NATIVE_MODULE_H_

#include <Python.h>

#include "interpreter/src/pyside_api.h"

namespace chorus::pyside {

// Must be called before Py_Initialize: registers `_chorus` as a built-in
// module of this interpreter, bound to `host`, library slot `slot` and
// interpreter index `index`.
void RegisterNativeModule(HostServices* host, int slot, int index);

// The host services and library slot this interpreter was registered with.
HostServices* Host();
// This interpreter's copy of torch's Python autograd engine (a
// torch::autograd::Engine*), or nullptr before torch._C initialized.
void* AutogradEngine();
int LibrarySlot();

// The exception class raised in a call stopped at its deadline
// (chorus.DeadlineExceeded, a BaseException so `except Exception` lets it
// through). Borrowed; valid after the module was imported.
PyObject* DeadlineExceededType();

}  // namespace chorus::pyside

#endif  // CHORUS_INTERPRETER_PYSIDE_NATIVE_MODULE_H_
