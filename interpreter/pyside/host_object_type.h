// `_chorus.HostObject`: this interpreter's Python object for a HostObject of
// the host (chorus/interpreter/host_object.h), and its bound methods, which
// Python calls with vectorcall. All functions require the GIL.
#ifndef CHORUS_INTERPRETER_PYSIDE_HOST_OBJECT_TYPE_H_
#define CHORUS_INTERPRETER_PYSIDE_HOST_OBJECT_TYPE_H_

#include <Python.h>

#include "chorus/interpreter/host_object.h"

namespace chorus::pyside {

// Readies the types and adds HostObject to `module` (_chorus, as it
// initializes). false with a Python exception set on failure.
bool AddHostObjectTypes(PyObject* module);

// A new reference to a Python object holding a strong reference to `object`.
PyObject* WrapHostObject(c10::intrusive_ptr<HostObject> object);

// The HostObject `obj` holds (borrowed: `obj` keeps it), or nullptr, no
// exception set, when `obj` is not a _chorus.HostObject.
HostObject* HostObjectIn(PyObject* obj);

}  // namespace chorus::pyside

#endif  // CHORUS_INTERPRETER_PYSIDE_HOST_OBJECT_TYPE_H_
