// Prometheus text exposition of the served models and the interpreters, in
// Triton's names where Triton has one (nv_inference_*), chorus_* otherwise.
#ifndef CHORUS_SERVER_MODELS_MODEL_METRICS_H_
#define CHORUS_SERVER_MODELS_MODEL_METRICS_H_

#include <string>

#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/server/models/model_repository.h"

namespace chorus {

// Renders every metric: per model and version, request success and failure
// counts, queue and compute durations, inference and execution counts,
// pending requests and a batch-size histogram; per interpreter, busy time.
std::string RenderModelMetrics(const ModelRepository& repository,
                               const InterpreterManager& manager);

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_MODEL_METRICS_H_
