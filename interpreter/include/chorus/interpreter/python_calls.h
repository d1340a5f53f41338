// Calls from C++ into a Python module's functions, as chorus' model layers
// (Triton's Python backend, TorchServe's workers) make them: within a time
// limit, and with a Python exception turned into a Status a client may see
// (the exception's message) while its traceback goes to the log.
//
// Thread-safe functions; a call runs on the calling thread, in `session`'s
// interpreter.
#ifndef CHORUS_INTERPRETER_PYTHON_CALLS_H_
#define CHORUS_INTERPRETER_PYTHON_CALLS_H_

#include <ATen/core/ivalue.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/interpreter/interpreter_manager.h"

namespace chorus {

// Options whose deadline is `limit` from now (none when `limit` is 0).
CallOptions CallWithin(std::chrono::milliseconds limit);

// <module>.<function>(*args) in `session`'s interpreter (the module imported
// if it is not yet). Errors: the import's, the function's (a Python
// exception: python_error() set), the deadline's.
StatusOr<Object> CallModuleFunction(InterpreterSession& session, std::string_view module,
                                    std::string_view function, const std::vector<c10::IValue>& args,
                                    const CallOptions& options = {});

// `status` as a client and the log see it: for a Python exception, its
// traceback logged (a warning naming `what`) and "<what>: <its message>" with
// its code; any other error annotated with `what`; OK unchanged.
Status WithPythonErrorLogged(const Status& status, const std::string& what);

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_PYTHON_CALLS_H_
