// c10 warning handlers across torch versions (torch 2 changed the handler's
// signature and moved its accessors to c10::WarningUtils). Header-only: used by
// the host and by each interpreter's Python side.
#ifndef CHORUS_INTERPRETER_C10_WARNINGS_H_
#define CHORUS_INTERPRETER_C10_WARNINGS_H_

#include <c10/util/Exception.h>

#include <string>

namespace chorus {

// A c10 warning handler that sees each warning's message.
class WarningMessageHandler : public c10::WarningHandler {
 public:
  // Handles one warning; it may pass it on unchanged with Forward(next).
  virtual void OnWarning(const std::string& message) = 0;

  void process(const c10::Warning& warning) override {
    current_ = &warning;
    OnWarning(warning.msg());
    current_ = nullptr;
  }

 protected:
  void Forward(c10::WarningHandler* next) { next->process(*current_); }

 private:
  const c10::Warning* current_ = nullptr;
};

// The calling thread's current handler, and the scope that replaces it.
inline c10::WarningHandler* CurrentWarningHandler() {
  return c10::WarningUtils::get_warning_handler();
}
using WarningHandlerScope = c10::WarningUtils::WarningHandlerGuard;

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_C10_WARNINGS_H_
