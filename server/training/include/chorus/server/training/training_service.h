// server/training/: chorus.training.TrainingService, training jobs on the
// server's interpreters next to the models it serves, on one server or
// across several. The handlers (this file) authorize, convert and hand off;
// the core (training_core.h) builds and runs jobs, off the reactors: builds
// on the shared background runner, joins on their own, each job's
// operations on the job's runner. Around it: the registry of jobs and their
// states (job_registry.h), the journal that survives restarts
// (job_journal.h), the other hosts of a job (job_hosts.h) and the watch of
// its driver (driver_watch.h), the messages (job_proto.h) and the metrics
// (job_metrics.h).
#ifndef CHORUS_SERVER_TRAINING_TRAINING_SERVICE_H_
#define CHORUS_SERVER_TRAINING_TRAINING_SERVICE_H_

#include <functional>
#include <memory>
#include <string>

#include "chorus/common/background_runner.h"
#include "chorus/server/rpc/authorizer.h"
#include "chorus/server/training/training_core.h"
#include "chorus/training/training_service.grpc.pb.h"

namespace chorus {

class TrainingService final : public chorus::training::TrainingService::CallbackService {
 public:
  // All three outlive the service; `background` runs job builds and tear-downs.
  TrainingService(const Authorizer* authorizer, TrainingCore* core, BackgroundRunner* background)
      : authorizer_(authorizer), core_(core), background_(background) {}
  // Stop().
  ~TrainingService() override;
  // Finishes the joins under way. Call before the core goes; idempotent.
  void Stop();

  grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* ctx,
                                      const training::CreateJobRequest* request,
                                      training::CreateJobResponse* response) override;
  grpc::ServerUnaryReactor* Step(grpc::CallbackServerContext* ctx,
                                 const training::StepRequest* request,
                                 training::StepResponse* response) override;
  grpc::ServerUnaryReactor* SaveCheckpoint(grpc::CallbackServerContext* ctx,
                                           const training::SaveCheckpointRequest* request,
                                           training::SaveCheckpointResponse* response) override;
  grpc::ServerUnaryReactor* LoadCheckpoint(grpc::CallbackServerContext* ctx,
                                           const training::LoadCheckpointRequest* request,
                                           training::LoadCheckpointResponse* response) override;
  grpc::ServerUnaryReactor* Export(grpc::CallbackServerContext* ctx,
                                   const training::ExportRequest* request,
                                   training::ExportResponse* response) override;
  grpc::ServerUnaryReactor* Evaluate(grpc::CallbackServerContext* ctx,
                                     const training::EvaluateRequest* request,
                                     training::EvaluateResponse* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx,
                                     const training::GetStatsRequest* request,
                                     training::JobStats* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const training::ListJobsRequest* request,
                                     training::ListJobsResponse* response) override;
  grpc::ServerWriteReactor<training::StepMetrics>* StreamMetrics(
      grpc::CallbackServerContext* ctx, const training::StreamMetricsRequest* request) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx,
                                      const training::DeleteJobRequest* request,
                                      training::DeleteJobResponse* response) override;
  grpc::ServerUnaryReactor* JoinJob(grpc::CallbackServerContext* ctx,
                                    const training::JoinJobRequest* request,
                                    training::JoinJobResponse* response) override;

 private:
  // An operation of job `job_id`: `operation` runs on the job's runner with
  // the call's deadline and cancellation (not at all when the call ended, or
  // the job failed, while it waited), and its status finishes the call.
  using Operation = std::function<Status(JobEntry&, const StopConditions&)>;
  grpc::ServerUnaryReactor* QueueOperation(grpc::CallbackServerContext* ctx,
                                           const std::string& job_id, Operation operation);

  const Authorizer* const authorizer_;
  TrainingCore* const core_;
  BackgroundRunner* const background_;
  // Joins wait for their whole job to meet: on their own thread, so that a
  // join never waits behind this server's own CreateJob (two servers driving
  // jobs on each other would otherwise each wait for the other).
  BackgroundRunner joins_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_TRAINING_TRAINING_SERVICE_H_
