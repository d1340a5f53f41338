// A TorchServe model's serving settings: its archive's model-config.yaml
// (read by server/torchserve) over what config.properties gives the model
// (its models= and model_snapshot keys), over TorchServe's defaults.
#ifndef CHORUS_SERVER_CONFIG_TORCHSERVE_MODEL_SETTINGS_H_
#define CHORUS_SERVER_CONFIG_TORCHSERVE_MODEL_SETTINGS_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string_view>

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

// Sets the setting that model-config.yaml (and config.properties' models=)
// calls `key` ("minWorkers", "batchSize", "sequenceBatching" as 0 or 1, ...)
// to `value` (>= 0; past int's range, its largest); false for a key that
// names none of them.
inline bool SetTorchServeSetting(std::string_view key, int64_t value,
                                 TorchServeModelSettings* settings) {
  const int count = static_cast<int>(std::min<int64_t>(value, std::numeric_limits<int>::max()));
  if (key == "minWorkers") {
    settings->min_workers = count;
  } else if (key == "maxWorkers") {
    settings->max_workers = count;
  } else if (key == "batchSize") {
    settings->batch_size = std::max(1, count);
  } else if (key == "maxBatchDelay") {
    settings->max_batch_delay = std::chrono::milliseconds(value);
  } else if (key == "responseTimeout") {
    settings->response_timeout = std::chrono::seconds(value);
  } else if (key == "sequenceBatching") {
    settings->sequence_batching = value != 0;
  } else if (key == "sequenceMaxIdleMSec") {
    settings->sequence_max_idle = std::chrono::milliseconds(value);
  } else if (key == "maxNumSequence") {
    settings->max_sequences = count;
  } else if (key == "maxSequenceJobQueueSize") {
    settings->max_waiting = count;
  } else {
    return false;
  }
  return true;
}

}  // namespace chorus

#endif  // CHORUS_SERVER_CONFIG_TORCHSERVE_MODEL_SETTINGS_H_
