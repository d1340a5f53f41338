// The model calls interpreters have open (chorus.serving): each started on
// the calling thread (with its context) and read, response by response, by
// a blocking Next. Thread-safe.
#ifndef CHORUS_INTERPRETER_SRC_MODEL_CALL_TABLE_H_
#define CHORUS_INTERPRETER_SRC_MODEL_CALL_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>

#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/model_calls.h"

namespace chorus {

class ModelCallTable {
 public:
  // nullptr: later calls fail UNAVAILABLE (the server is not serving).
  void SetHandler(std::shared_ptr<ModelCallHandler> handler) CHORUS_EXCLUDES(mu_);

  // Starts `call` with the calling thread's context, its deadline capped at
  // `timeout` from now (0: none); `stream` asks for every response. Returns
  // the call's handle for Next and End.
  StatusOr<uint64_t> Start(ModelCall call, std::chrono::nanoseconds timeout, bool stream)
      CHORUS_EXCLUDES(mu_);
  // Waits for the call's next response (an error response among them),
  // nullopt once it ended well, or its error. The caller's cancellation
  // reaches the call.
  StatusOr<std::optional<CallResponse>> Next(uint64_t handle) CHORUS_EXCLUDES(mu_);
  // Forgets the call, stopping it if it still runs; a Next waiting on it
  // returns CANCELLED. Any handle.
  void End(uint64_t handle) CHORUS_EXCLUDES(mu_);

  // The handler's repository calls, waited for (an unload only asked for:
  // Triton's unload returns before the model is gone).
  Status LoadModel(ModelLoadRequest load) CHORUS_EXCLUDES(mu_);
  Status UnloadModel(const std::string& model) CHORUS_EXCLUDES(mu_);
  StatusOr<bool> ModelReady(const std::string& model, const std::string& version)
      CHORUS_EXCLUDES(mu_);

 private:
  struct Call;
  std::shared_ptr<Call> Find(uint64_t handle) CHORUS_EXCLUDES(mu_);
  // The handler, or UNAVAILABLE when the server is not serving.
  StatusOr<std::shared_ptr<ModelCallHandler>> Handler() CHORUS_EXCLUDES(mu_);

  Mutex mu_;
  std::shared_ptr<ModelCallHandler> handler_ CHORUS_GUARDED_BY(mu_);
  std::map<uint64_t, std::shared_ptr<Call>> calls_ CHORUS_GUARDED_BY(mu_);
  uint64_t next_handle_ CHORUS_GUARDED_BY(mu_) = 1;
};

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_SRC_MODEL_CALL_TABLE_H_
