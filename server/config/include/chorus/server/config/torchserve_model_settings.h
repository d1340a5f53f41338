// A TorchServe model's serving settings: its archive's model-config.yaml
// (read by server/torchserve) over what config.properties gives the model
// (its models= and model_snapshot keys), over TorchServe's defaults.
#ifndef CHORUS_SERVER_CONFIG_TORCHSERVE_MODEL_SETTINGS_H_
#define CHORUS_SERVER_CONFIG_TORCHSERVE_MODEL_SETTINGS_H_

#include <chrono>

namespace chorus {

// The most workers a TorchServe model may have: each is a handler object in
// this process.
inline constexpr int kMaxTorchServeWorkers = 256;

struct TorchServeModelSettings {
  int min_workers = 0;  // 0: the server's default
  int max_workers = 0;
  int batch_size = 1;
  std::chrono::milliseconds max_batch_delay{100};
  std::chrono::seconds response_timeout{120};
  // Sequence batching (a stateful model): a sequence's requests run in order,
  // one at a time, on one worker; at most max_sequences active, each with at
  // most max_waiting requests waiting; one idle for sequence_max_idle ends.
  bool sequence_batching = false;
  std::chrono::milliseconds sequence_max_idle{0};  // 0: not stateful (TorchServe's rule)
  int max_sequences = 1;
  int max_waiting = 1;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_CONFIG_TORCHSERVE_MODEL_SETTINGS_H_
