// Prometheus text exposition of the server's state, in Triton's names where
// Triton has one (nv_inference_*), chorus_* otherwise.
#ifndef CHORUS_SERVER_MODELS_METRICS_H_
#define CHORUS_SERVER_MODELS_METRICS_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/server/models/model_repository.h"

namespace chorus {

// Renders every metric: per model and version, request success and failure
// counts, queue and compute durations, inference and execution counts,
// pending requests and a batch-size histogram; per interpreter, busy time.
std::string RenderMetrics(const ModelRepository& repository, const InterpreterManager& manager);

// The supervisor's figures: chorus_server_restarts_total, and
// chorus_server_last_exit_info{reason="..."} after a restart.
std::string RenderRestartMetrics(int restarts, const std::string& last_exit);

// This process's memory: resident, private writable (what a memory limit
// counts) and the limit itself when one is set (`limit_mib` > 0).
std::string RenderProcessMetrics(int64_t limit_mib);

// Writes a metric family's "# HELP" and "# TYPE" lines (type: counter, gauge,
// histogram); the one place the exposition format's header is written.
void AppendMetricHeader(std::ostream& out, const char* name, const char* type, const char* help);

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_METRICS_H_
