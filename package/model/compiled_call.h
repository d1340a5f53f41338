// How models that run without Python (TorchScript, AOTInductor) are called:
// compiled code cannot be interrupted, so a passed deadline is refused before
// the call, and torch's exceptions become INTERNAL. Internal to chorus_model.
#ifndef CHORUS_PACKAGE_MODEL_COMPILED_CALL_H_
#define CHORUS_PACKAGE_MODEL_COMPILED_CALL_H_

#include <ATen/core/ivalue.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <exception>

#include "chorus/common/status.h"
#include "chorus/interpreter/interpreter_manager.h"

namespace chorus::internal {

// run() in inference mode, unless `options.deadline` has passed.
template <typename Run>
StatusOr<c10::IValue> CallCompiled(const CallOptions& options, Run&& run) {
  if (std::chrono::steady_clock::now() >= options.deadline) {
    return DeadlineExceededError("deadline passed before the call started");
  }
  try {
    c10::InferenceMode guard;
    return run();
  } catch (const c10::Error& e) {
    return InternalError(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return InternalError(e.what());
  }
}

}  // namespace chorus::internal

#endif  // CHORUS_PACKAGE_MODEL_COMPILED_CALL_H_
