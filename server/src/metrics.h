// Prometheus text exposition of the server's state, in Triton's names where
// Triton has one (nv_inference_*), chorus_* otherwise.
#ifndef CHORUS_SERVER_METRICS_H_
#define CHORUS_SERVER_METRICS_H_

#include <string>

#include "chorus/interpreter/interpreter_manager.h"
#include "server/src/model_repository.h"

namespace chorus {

// Renders every metric: per model and version, request success and failure
// counts, queue and compute durations, inference and execution counts,
// pending requests and a batch-size histogram; per interpreter, busy time.
std::string RenderMetrics(const ModelRepository& repository, const InterpreterManager& manager);

}  // namespace chorus

#endif  // CHORUS_SERVER_METRICS_H_
