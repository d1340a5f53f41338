// Python exceptions as chorus Status.
#ifndef CHORUS_INTERPRETER_PYSIDE_PYTHON_ERROR_H_
#define CHORUS_INTERPRETER_PYSIDE_PYTHON_ERROR_H_

#include "chorus/common/status.h"

namespace chorus::pyside {

// GIL. Takes the pending Python exception (clearing it) and returns it as a
// Status carrying type, message and traceback: DEADLINE_EXCEEDED for
// chorus.DeadlineExceeded, INTERNAL for everything else. Returns an INTERNAL
// error without Python details if no exception is pending.
Status FetchPythonError();

}  // namespace chorus::pyside

#endif  // CHORUS_INTERPRETER_PYSIDE_PYTHON_ERROR_H_
