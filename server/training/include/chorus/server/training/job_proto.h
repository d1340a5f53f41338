// A training job's messages (chorus/training/training_service.proto) and its
// C++ types, both ways, with the checks a request's spec gets: the one place
// the service converts.
#ifndef CHORUS_SERVER_TRAINING_JOB_PROTO_H_
#define CHORUS_SERVER_TRAINING_JOB_PROTO_H_

#include <ATen/ATen.h>

#include <chrono>
#include <string>

#include "chorus/common/status.h"
#include "chorus/server/training/job_registry.h"
#include "chorus/training/job/training_job.h"
#include "chorus/training/training_service.pb.h"

namespace chorus {

// The request's spec: its fields where set, the spec's defaults elsewhere
// (proto3 reads an unset number as 0; where 0 is a value the field is optional).
TrainingSpec SpecFromProto(const training::JobSpec& from);
// The spec as the service takes it: the training spec's checks, a
// checkpoint directory the server can find again after a restart, and, for
// a job across servers, distinct host:port addresses. INVALID_ARGUMENT.
Status ValidateJobSpec(const training::JobSpec& spec);
// dp_shard x tp.
int RanksOf(const training::JobSpec& spec);
// How long the job's collectives wait for the other ranks.
std::chrono::milliseconds CollectiveTimeout(const training::JobSpec& spec);

StatusOr<at::Tensor> TensorFromProto(const training::Tensor& tensor);
// As FP32.
void TensorToProto(const at::Tensor& tensor, training::Tensor* out);
void MetricsToProto(const std::string& job, const StepMetrics& metrics, training::StepMetrics* out);
// A published job's stats, and a held one's (being resumed, or not resumable).
void JobStatsToProto(const std::string& id, const JobEntry& entry, training::JobStats* out);
void HeldJobToProto(const std::string& id, const JobRegistry::HeldJob& held,
                    training::JobStats* out);

}  // namespace chorus

#endif  // CHORUS_SERVER_TRAINING_JOB_PROTO_H_
