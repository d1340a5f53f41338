#include "chorus/interpreter/python_calls.h"

#include "chorus/common/logging.h"

namespace chorus {

CallOptions CallWithin(std::chrono::milliseconds limit) {
  CallOptions options;
  if (limit.count() > 0) options.deadline = std::chrono::steady_clock::now() + limit;
  return options;
}

StatusOr<Object> CallModuleFunction(InterpreterSession& session, std::string_view module,
                                    std::string_view function, const std::vector<c10::IValue>& args,
                                    const CallOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(Object fn, session.Global(module, function));
  return fn.Call(args, {}, options);
}

Status WithPythonErrorLogged(const Status& status, const std::string& what) {
  if (status.ok()) return status;
  const PythonError* error = status.python_error();
  if (error == nullptr) return status.Annotate(what);
  Log().warn("{}: {}\n{}", what, status.message(), error->traceback);
  return Status(status.code(), what + ": " + error->message);
}

}  // namespace chorus
