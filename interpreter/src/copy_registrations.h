// Registrations every copy of libtorch_python makes as it loads.
//
// libtorch_python registers operators, kernels and TorchScript classes from
// static initializers (TORCH_LIBRARY_FRAGMENT / TORCH_LIBRARY_IMPL blocks,
// torch::class_). The dispatcher and the class table are one per process, so
// the second interpreter's copy would register them again: c10 throws from a
// static initializer (which ends the process) or warns that a kernel was
// overridden. Each copy's calls to those registration functions are bound
// instead (undefined symbols renamed in the copy) to chorus' wrappers, which
// pass them through, except while a further copy is being loaded
// (SkipCopyRegistrations): the first copy's registrations serve every
// interpreter (they are C++ code, callable from any thread).
#ifndef CHORUS_INTERPRETER_COPY_REGISTRATIONS_H_
#define CHORUS_INTERPRETER_COPY_REGISTRATIONS_H_

#include <map>
#include <string>

namespace chorus {

// The exported symbol name of the function whose code starts at `code`, or "".
// Names to rename are taken from the functions themselves, so they follow the
// torch chorus is built with (mangled names change between releases: torch
// 2.11 spells at::Tag, 2.14 torch::headeronly::Tag).
std::string ExportedName(const void* code);

// Undefined symbols to rename in each libtorch_python copy (old -> new).
// A name the copy does not import is skipped.
std::map<std::string, std::string> TorchPythonImportEdits();

// While alive, the calling thread's registrations through the wrappers are
// skipped if `skip`. Not copyable; one thread.
class SkipCopyRegistrations {
 public:
  explicit SkipCopyRegistrations(bool skip);
  ~SkipCopyRegistrations();
  SkipCopyRegistrations(const SkipCopyRegistrations&) = delete;
  SkipCopyRegistrations& operator=(const SkipCopyRegistrations&) = delete;

 private:
  bool previous_;
};

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_COPY_REGISTRATIONS_H_
