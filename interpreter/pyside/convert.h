// Conversions between c10::IValue and Python objects of this interpreter.
//
// Tensors never cross as the same TensorImpl: a TensorImpl (and with torch 2.x
// a StorageImpl) holds the Python object of the interpreter that wrapped it.
// Every tensor crossing the boundary, either way, becomes an alias made by the
// host (HostServices::CrossingAlias: a new TensorImpl, and StorageImpl, over
// the same memory, same version counter, no autograd history). So the host
// only ever holds TensorImpls without Python objects, and each interpreter
// only the ones it made. No tensor data is copied.
//
// All functions require the GIL and follow CPython's convention: on failure
// they return nullptr / false with a Python exception set.
#ifndef CHORUS_INTERPRETER_PYSIDE_CONVERT_H_
#define CHORUS_INTERPRETER_PYSIDE_CONVERT_H_

#include <Python.h>

#include <ATen/core/ivalue.h>

namespace chorus::pyside {

// The alias of `tensor` that may cross into another interpreter or the host;
// `tensor` itself within a WithinInterpreterScope.
at::Tensor CrossingAlias(const at::Tensor& tensor);

// While alive with `within`, tensors pass this interpreter's boundary as they
// are: a Python kernel called from its own interpreter sees the caller's very
// tensors (FakeTensors, wrapped numbers, identity), as torch's own kernels do.
// Nests; one thread.
class WithinInterpreterScope {
 public:
  explicit WithinInterpreterScope(bool within);
  ~WithinInterpreterScope();
  WithinInterpreterScope(const WithinInterpreterScope&) = delete;
  WithinInterpreterScope& operator=(const WithinInterpreterScope&) = delete;

 private:
  bool previous_;
};

// A new reference to the Python equivalent of `value`: None, bool, int, float,
// str, torch.Tensor, list, tuple, dict, a HostObject (host_object_type.h) (and
// torch.device, dtype-likes via torch).
// Strings decode as UTF-8 with errors="surrogateescape", so any bytes cross.
PyObject* IValueToPython(const c10::IValue& value);

// Converts None, bool, int, float, str, bytes (both to strings), torch.Tensor,
// a _chorus.HostObject, list, tuple and dict (string, int or tensor keys),
// recursively. Lists of one element kind become typed lists (TensorList,
// IntList, ...), other lists GenericList.
bool PythonToIValue(PyObject* obj, c10::IValue* out);

// Makes sure torch's Python bindings are initialized in this interpreter, so
// tensors can be wrapped. Returns false with an exception set if torch fails.
bool EnsureTorchImported();

}  // namespace chorus::pyside

#endif  // CHORUS_INTERPRETER_PYSIDE_CONVERT_H_
