// Model code calling other served models in process (Python's
// chorus.serving.infer, Triton's BLS), and the repository (Triton's
// pb_utils.load_model): the interpreter layer carries a call from model
// code to the handler the interpreters' owner installed
// (InterpreterManager::SetModelCallHandler), with the context of the request
// the calling thread serves, which whoever runs models sets
// (ScopedModelCallContext). Tensors travel as IValues: no copies.
#ifndef CHORUS_INTERPRETER_MODEL_CALLS_H_
#define CHORUS_INTERPRETER_MODEL_CALLS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <ATen/core/ivalue.h>

#include "chorus/common/parameters.h"
#include "chorus/common/status.h"

namespace chorus {

// Tensors (or string tensors) by name.
using NamedValues = std::vector<std::pair<std::string, c10::IValue>>;

// One answer of a called model: its outputs by name and its parameters, or a
// stream's error response (the stream goes on after it).
struct CallResponse {
  NamedValues outputs;
  Parameters parameters;
  Status error;        // not OK: an error response, with no outputs
  bool final = false;  // the call's last response (a model answering once: its one)
};

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
  std::function<bool(CallResponse)> on_response;
  // Whether the calling thread only waits for the answer, so the call may run
  // on it; false for a call that must return at once (an async one).
  bool caller_waits = true;
  // The request's own fields, which a model that reads its requests (a Triton
  // Python-backend model) sees; Triton's BLS requests carry them.
  std::string request_id;
  Parameters parameters;
  std::variant<uint64_t, std::string> correlation_id = uint64_t{0};
  uint32_t flags = 0;  // sequence start (1) and end (2)
};

// A load model code asks for (Triton's pb_utils.load_model): for that load, a
// config (Triton's JSON form) and files (path in the model's folder ->
// contents) that take the place of the folder's. Both empty: the folder's.
struct ModelLoadRequest {
  std::string model;
  std::string config_json;
  std::map<std::string, std::string> files;
};

class ModelCallHandler {
 public:
  virtual ~ModelCallHandler() = default;
  // Runs `call`; `done` exactly once, from any thread: the answer (empty
  // after a stream's responses), or why the call failed.
  virtual void Call(ModelCall call, std::function<void(StatusOr<CallResponse>)> done) = 0;

  // The repository's calls from model code; `done` exactly once, from any
  // thread. By default refused (UNIMPLEMENTED): a handler that serves no
  // repository.
  virtual void LoadModel(ModelLoadRequest load, std::function<void(Status)> done);
  virtual void UnloadModel(std::string model, std::function<void(Status)> done);
  // Whether `model` (version `version`, "" the newest) serves; NOT_FOUND for
  // one the repository does not have.
  virtual StatusOr<bool> ModelReady(const std::string& model, const std::string& version);
};

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_MODEL_CALLS_H_
