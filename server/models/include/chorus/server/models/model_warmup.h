// Triton's model warm-up: before a model is ready, it runs on samples its
// config describes ("model_warmup"), each `count` times on every interpreter
// (so every replica is made and has run, and the first client waits for
// neither). A failing sample fails the load.
#ifndef CHORUS_SERVER_MODELS_MODEL_WARMUP_H_
#define CHORUS_SERVER_MODELS_MODEL_WARMUP_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/package/model.h"
#include "chorus/server/models/model_config.h"

namespace chorus {

// Runs `samples` on `model` (whose signature is `manifest`), each `count`
// times on each of `interpreters` interpreters (once for models that run on
// none). INVALID_ARGUMENT naming the sample and input for a file that is
// missing or of the wrong size, an input the model lacks, or dims that do not
// fit; the model's own error, naming the sample, when it fails on one.
Status WarmUp(Model& model, const Manifest& manifest, const std::vector<WarmupSample>& samples,
              const std::string& model_dir, int interpreters);

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_MODEL_WARMUP_H_
