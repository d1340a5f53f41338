// Where a model of the repository is in its life (Triton's ModelReadyState),
// converted to the protocol's text only where a response is written.
#ifndef CHORUS_SERVER_MODELS_MODEL_STATE_H_
#define CHORUS_SERVER_MODELS_MODEL_STATE_H_

namespace chorus {

enum class ModelState {
  kLoading,      // its first version is being loaded; nothing of it serves yet
  kReady,        // a version serves (a reload may be under way)
  kUnavailable,  // nothing serves: unloaded, failed to load, or quarantined
};

// The Open Inference Protocol's name: "LOADING", "READY", "UNAVAILABLE".
const char* ModelStateName(ModelState state);

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_MODEL_STATE_H_
