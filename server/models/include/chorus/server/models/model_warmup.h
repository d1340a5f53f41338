// Triton's model warm-up: before a model is ready, it runs on samples its
// config describes ("model_warmup"), each `count` times on every interpreter
// (so every replica is made and has run, and the first client waits for
// neither), or on every instance of a model that answers its requests itself.
// A failing sample fails the load.
#ifndef CHORUS_SERVER_MODELS_MODEL_WARMUP_H_
#define CHORUS_SERVER_MODELS_MODEL_WARMUP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/package/model.h"
#include "chorus/server/config/model_config.h"
#include "chorus/serving/request_executor.h"

namespace chorus {

// Runs `samples` on `model` (whose signature is `manifest`), each `count`
// times on each of `interpreters` interpreters (once for models that run on
// none). INVALID_ARGUMENT naming the sample and input for a file that is
// missing or of the wrong size, an input the model lacks, or dims that do not
// fit; the model's own error, naming the sample, when it fails on one.
Status WarmUp(Model& model, const Manifest& manifest, const std::vector<WarmupSample>& samples,
              const std::string& model_dir, int interpreters);

// As above, on each instance of `executor`, each run waiting up to `timeout`
// for its final response.
Status WarmUp(RequestExecutor& executor, const Manifest& manifest,
              const std::vector<WarmupSample>& samples, const std::string& model_dir,
              std::chrono::milliseconds timeout);

// What both run: `run(inputs, replica)` for each sample, `count` times on
// each replica (0 .. replicas - 1), the inputs made as the sample says.
using WarmupRun = std::function<Status(const std::vector<c10::IValue>& inputs, int replica)>;
Status WarmUp(const std::vector<WarmupSample>& samples, const Manifest& manifest,
              const std::string& model_dir, int replicas, const WarmupRun& run);

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_MODEL_WARMUP_H_
