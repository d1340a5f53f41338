// What the server tells about its jobs' steps: Prometheus gauges of each
// job's last step (on /metrics), and StreamMetrics' stream of a job's steps.
#ifndef CHORUS_SERVER_TRAINING_JOB_METRICS_H_
#define CHORUS_SERVER_TRAINING_JOB_METRICS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "chorus/common/status.h"
#include "chorus/server/training/job_registry.h"
#include "chorus/training/training_service.pb.h"

namespace chorus {

// Prometheus gauges of every published job's last step (chorus_training_*).
std::string RenderJobMetrics(const JobRegistry& jobs);

// A StreamMetrics reactor: sends `entry`'s steps from `from_step` on, then
// each new step, until the job is closed or the client goes away. Owns itself.
grpc::ServerWriteReactor<training::StepMetrics>* NewMetricsStream(std::shared_ptr<JobEntry> entry,
                                                                  std::string job_id,
                                                                  int64_t from_step);
// A StreamMetrics reactor that only finishes with `status`. Owns itself.
grpc::ServerWriteReactor<training::StepMetrics>* RefusedMetricsStream(const Status& status);

}  // namespace chorus

#endif  // CHORUS_SERVER_TRAINING_JOB_METRICS_H_
