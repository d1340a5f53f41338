// torch 2.9 and later keep one PyInterpreter for the whole process
// (c10::impl::getGlobalPyInterpreter(), found through c10's
// PyInterpreterHooksRegistry), and libtorch calls it for every Python object
// it touches from C++: reference counts of Python-wrapped tensors and storages
// (on any thread), Python dispatch, Python kernels, tensor subclass metadata.
// chorus registers its own PyInterpreter first; it forwards each call to the
// PyInterpreter of the interpreter that owns the Python object involved, or
// else the one the calling thread works in (interpreter_registry.h). Calls for
// a finalized interpreter's objects are no-ops. Each interpreter's copy of
// libtorch_python registers its hooks under a key of its own (a string
// constant edited in the copy), so no copy competes with the host for the
// registry's one key.
#ifndef CHORUS_INTERPRETER_PY_INTERPRETER_ROUTER_H_
#define CHORUS_INTERPRETER_PY_INTERPRETER_ROUTER_H_

#include <map>
#include <string>

namespace chorus {

// String constants to rewrite in slot `slot`'s copy of libtorch_python (empty
// when no routing is needed).
std::map<std::string, std::string> TorchPythonConstantEdits(int slot);
// Undefined symbols to rename in each copy of libtorch_python (old -> new):
// the copy registers chorus' PyInterpreter, not its own, for Python kernels.
std::map<std::string, std::string> TorchPythonRoutingImportEdits();

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_PY_INTERPRETER_ROUTER_H_
