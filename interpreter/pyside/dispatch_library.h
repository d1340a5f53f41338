// Dispatcher libraries created from Python (torch.library), owned by chorus.
//
// torch's Python API creates c10 dispatcher libraries whose lifetime follows a
// Python object. chorus creates them instead (torch._C._dispatch_library is
// shimmed, see chorus/_torch_compat.py) so that:
//  - every registration an interpreter made is removed when it is finalized,
//    even if Python never frees the object, so the dispatcher never calls into
//    a dead interpreter and a later interpreter can register again;
//  - kernels written in Python run in the interpreter that registered them,
//    with tensors crossing as aliases both ways. torch's own wrapper hands the
//    kernel the caller's tensors as they are, which fails when the caller is
//    another interpreter (those tensors are tagged with it).
#ifndef CHORUS_INTERPRETER_PYSIDE_DISPATCH_LIBRARY_H_
#define CHORUS_INTERPRETER_PYSIDE_DISPATCH_LIBRARY_H_

#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>

#include <Python.h>

namespace chorus::pyside {

// All functions: GIL required; nullptr with a Python exception on failure.

// A new library of `kind` ("DEF", "IMPL" or "FRAGMENT") for namespace `ns`
// and, if not "", one dispatch key. Returns a capsule that owns it: dropping
// the capsule removes every registration made through it.
PyObject* OpenLibrary(const char* kind, const char* ns, const char* dispatch_key, const char* file,
                      int line);

// Defines an operator from `schema` in `library`, with `tags` (at::Tag
// values); returns its name.
PyObject* LibraryDefine(PyObject* library, const char* schema, const char* alias_analysis,
                        const std::vector<int>& tags);

// Registers Python callable `fn` (None: a fallthrough) as the kernel of
// operator `name` for `dispatch_key` ("" = the library's key, or all keys);
// `with_keyset` kernels get the dispatch key set first. `key` names the
// registration process-wide: other interpreters' functions for it
// (HostServices::AddKernelFunction) run their own calls. Returns None.
PyObject* LibraryImpl(PyObject* library, const char* name, const char* dispatch_key, PyObject* fn,
                      bool with_keyset, const char* key);

// Runs Python kernel function `fn` of this interpreter for a call made in this
// interpreter (tensors pass as they are). GIL not held. Throws c10::Error.
void RunPythonKernel(PyObject* fn, bool with_keyset, const c10::OperatorHandle& op,
                     c10::DispatchKeySet keys, torch::jit::Stack* stack);

// Registers `fn` (None: a fallthrough) as the fallback of `dispatch_key`.
PyObject* LibraryFallback(PyObject* library, const char* dispatch_key, PyObject* fn,
                          bool with_keyset);

// Removes every registration made through `library` and closes it.
PyObject* LibraryReset(PyObject* library);

// Removes every registration this interpreter still holds. Called just before
// the interpreter is finalized.
void CloseAllLibraries();

}  // namespace chorus::pyside

#endif  // CHORUS_INTERPRETER_PYSIDE_DISPATCH_LIBRARY_H_
