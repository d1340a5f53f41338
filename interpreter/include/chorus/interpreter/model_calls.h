// Model code calling other served models in process (Python's
// chorus.serving.infer): the interpreter layer carries a call from model
// code to the handler the interpreters' owner installed
// (InterpreterManager::SetModelCallHandler), with the context of the request
// the calling thread serves, which whoever runs models sets
// (ScopedModelCallContext). Tensors travel as IValues: no copies.
#ifndef CHORUS_INTERPRETER_MODEL_CALLS_H_
#define CHORUS_INTERPRETER_MODEL_CALLS_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "chorus/common/status.h"

namespace chorus {

// Tensors (or string tensors) by name.
using NamedValues = std::vector<std::pair<std::string, c10::IValue>>;

// What the request a thread serves passes on to the calls its model makes.
struct ModelCallContext {
  std::vector<std::string> call_path;  // the models running it, outermost first
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::shared_ptr<std::atomic<bool>> cancelled;  // optional
};

// Makes `context` the calling thread's for its scope; restores the previous
// one after. Not copyable; create and destroy on one thread.
class ScopedModelCallContext {
 public:
  explicit ScopedModelCallContext(const ModelCallContext* context);
  ~ScopedModelCallContext();
  ScopedModelCallContext(const ScopedModelCallContext&) = delete;
  ScopedModelCallContext& operator=(const ScopedModelCallContext&) = delete;

 private:
  const ModelCallContext* previous_;
};

// The calling thread's context, or nullptr outside any model run.
const ModelCallContext* CurrentModelCallContext();

struct ModelCall {
  std::string model;
  std::string version;               // "": the one serving
  NamedValues inputs;                // by the model's input names
  std::vector<std::string> outputs;  // the outputs wanted; empty: all
  // The caller's context, its deadline already the earlier of the caller's
  // and the call's own timeout.
  ModelCallContext context;
  // Set for a stream: each response of a decoupled model, in order (false
  // stops the model); a model that answers once answers through `done`.
  std::function<bool(NamedValues)> on_response;
  // Whether the calling thread only waits for the answer, so the call may run
  // on it; false for a call that must return at once (an async one).
  bool caller_waits = true;
};

class ModelCallHandler {
 public:
  virtual ~ModelCallHandler() = default;
  // Runs `call`; `done` exactly once, from any thread: the outputs (empty
  // after a stream's responses), or why the call failed.
  virtual void Call(ModelCall call, std::function<void(StatusOr<NamedValues>)> done) = 0;
};

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_MODEL_CALLS_H_
