// Operator kernels written in Python (torch.library Library.impl), registered
// so that any interpreter can call them.
//
// torch's own Python kernel wrapper hands the kernel the caller's tensors as
// they are, which fails when the caller is another interpreter (the tensors
// are tagged with it). This kernel runs the Python function in the interpreter
// that registered it, with tensors crossing as aliases both ways.
#ifndef CHORUS_INTERPRETER_PYSIDE_PYTHON_KERNEL_H_
#define CHORUS_INTERPRETER_PYSIDE_PYTHON_KERNEL_H_

#include <Python.h>

namespace chorus::pyside {

// Registers `fn` as the kernel of operator `name` (optionally "ns::name.overload")
// in namespace `ns` for `dispatch_key` ("" = all keys). Returns a capsule that
// owns the registration: dropping it unregisters the kernel. GIL required;
// nullptr with a Python exception on failure.
PyObject* RegisterPythonKernel(const char* ns, const char* name, const char* dispatch_key,
                               PyObject* fn);

// Unregisters every kernel this interpreter still has registered. Called just
// before the interpreter is finalized, GIL held.
void UnregisterAllPythonKernels();

}  // namespace chorus::pyside

#endif  // CHORUS_INTERPRETER_PYSIDE_PYTHON_KERNEL_H_
