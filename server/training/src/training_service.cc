#include "chorus/server/training/training_service.h"

#include <utility>

#include "chorus/server/rpc/grpc_call.h"
#include "chorus/server/rpc/grpc_status.h"
#include "chorus/server/training/job_metrics.h"
#include "chorus/server/training/job_proto.h"

namespace chorus {
namespace {

// The call's kDriverMetadata ("" without one).
std::string DriverMarker(const grpc::CallbackServerContext& ctx) {
  auto marker = ctx.client_metadata().find(kDriverMetadata);
  if (marker == ctx.client_metadata().end()) return "";
  return std::string(marker->second.data(), marker->second.size());
}

// Finishes `reactor` with `done`'s status once it has run on `runner`, or at
// once (UNAVAILABLE) when the server is shutting down.
void FinishOn(BackgroundRunner& runner, grpc::ServerUnaryReactor* reactor,
              std::function<Status()> done) {
  const bool posted =
      runner.Post([reactor, done = std::move(done)] { reactor->Finish(ToGrpcStatus(done())); });
  if (!posted) reactor->Finish(ToGrpcStatus(UnavailableError("the server is shutting down")));
}

}  // namespace

TrainingService::~TrainingService() { Stop(); }

void TrainingService::Stop() { joins_.Stop(); }

grpc::ServerUnaryReactor* TrainingService::QueueOperation(grpc::CallbackServerContext* ctx,
                                                          const std::string& job_id,
                                                          Operation operation) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  StatusOr<std::shared_ptr<JobEntry>> entry = core_->jobs().Find(job_id);
  if (!entry.ok()) return FinishCall(ctx, entry.status());
  CHORUS_FINISH_CALL_IF_ERROR(ctx, core_->CheckCaller(job_id, **entry, DriverMarker(*ctx)));
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::shared_ptr<JobEntry> job = *entry;
  StopConditions stop;
  stop.deadline = ClientDeadline(*ctx);
  stop.cancelled = [ctx] { return ctx->IsCancelled(); };
  if (!job->runner.Post([job, reactor, stop, operation = std::move(operation)] {
        Status status = stop.Check();
        // It may have failed while this call waited.
        if (status.ok()) status = job->failure();
        reactor->Finish(ToGrpcStatus(status.ok() ? operation(*job, stop) : status));
      })) {
    reactor->Finish(ToGrpcStatus(NotFoundError("training job \"" + job_id + "\" was deleted")));
  }
  return reactor;
}

grpc::ServerUnaryReactor* TrainingService::CreateJob(grpc::CallbackServerContext* ctx,
                                                     const training::CreateJobRequest* request,
                                                     training::CreateJobResponse* response) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  CHORUS_FINISH_CALL_IF_ERROR(ctx, ValidateJobSpec(request->spec()));
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // Building the model takes a while: off the reactor. The job is published
  // only once it exists.
  FinishOn(*background_, reactor, [this, spec = request->spec(), response]() -> Status {
    CHORUS_ASSIGN_OR_RETURN(TrainingCore::CreatedJob created, core_->Create(spec));
    response->set_job_id(created.id);
    for (int i : created.entry->job->options().interpreters) response->add_interpreters(i);
    response->set_step(created.entry->job->CurrentStep());
    return OkStatus();
  });
  return reactor;
}

grpc::ServerUnaryReactor* TrainingService::Step(grpc::CallbackServerContext* ctx,
                                                const training::StepRequest* request,
                                                training::StepResponse* response) {
  std::optional<at::Tensor> batch;
  if (request->has_batch()) {
    StatusOr<at::Tensor> tokens = TensorFromProto(request->batch());
    if (!tokens.ok()) return FinishCall(ctx, tokens.status());
    batch = *tokens;
  }
  const std::string id = request->job_id();
  return QueueOperation(ctx, id, [=, this](JobEntry& entry, const StopConditions& stop) -> Status {
    StatusOr<std::vector<StepMetrics>> steps = core_->Step(id, entry, *request, batch, stop);
    if (!steps.ok()) return steps.status();
    for (const StepMetrics& m : *steps) MetricsToProto(id, m, response->add_steps());
    return OkStatus();
  });
}

grpc::ServerUnaryReactor* TrainingService::SaveCheckpoint(
    grpc::CallbackServerContext* ctx, const training::SaveCheckpointRequest* request,
    training::SaveCheckpointResponse* response) {
  const std::string id = request->job_id();
  return QueueOperation(ctx, id, [=, this](JobEntry& entry, const StopConditions&) -> Status {
    CHORUS_ASSIGN_OR_RETURN(std::string path, core_->Save(id, entry, request->directory()));
    response->set_path(path);
    response->set_step(entry.job->CurrentStep());
    return OkStatus();
  });
}

grpc::ServerUnaryReactor* TrainingService::LoadCheckpoint(
    grpc::CallbackServerContext* ctx, const training::LoadCheckpointRequest* request,
    training::LoadCheckpointResponse* response) {
  const std::string id = request->job_id();
  return QueueOperation(ctx, id, [=, this](JobEntry& entry, const StopConditions&) -> Status {
    CHORUS_ASSIGN_OR_RETURN(int64_t step, core_->Load(id, entry, request->path()));
    response->set_step(step);
    return OkStatus();
  });
}

grpc::ServerUnaryReactor* TrainingService::Export(grpc::CallbackServerContext* ctx,
                                                  const training::ExportRequest* request,
                                                  training::ExportResponse* response) {
  const std::string id = request->job_id();
  return QueueOperation(ctx, id, [=, this](JobEntry& entry, const StopConditions&) -> Status {
    CHORUS_ASSIGN_OR_RETURN(auto exported, core_->Export(id, entry, *request));
    response->set_version(exported.first);
    response->set_path(exported.second);
    return OkStatus();
  });
}

grpc::ServerUnaryReactor* TrainingService::Evaluate(grpc::CallbackServerContext* ctx,
                                                    const training::EvaluateRequest* request,
                                                    training::EvaluateResponse* response) {
  StatusOr<at::Tensor> tokens = TensorFromProto(request->tokens());
  if (!tokens.ok()) return FinishCall(ctx, tokens.status());
  const std::string id = request->job_id();
  return QueueOperation(
      ctx, id, [=, this, input = *tokens](JobEntry& entry, const StopConditions&) -> Status {
        CHORUS_ASSIGN_OR_RETURN(at::Tensor output, core_->Evaluate(id, entry, input, *request));
        TensorToProto(output, response->mutable_output());
        return OkStatus();
      });
}

grpc::ServerUnaryReactor* TrainingService::GetStats(grpc::CallbackServerContext* ctx,
                                                    const training::GetStatsRequest* request,
                                                    training::JobStats* response) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  StatusOr<std::shared_ptr<JobEntry>> entry = core_->jobs().Find(request->job_id());
  if (!entry.ok()) return FinishCall(ctx, entry.status());
  JobStatsToProto(request->job_id(), **entry, response);
  return FinishCall(ctx, OkStatus());
}

grpc::ServerUnaryReactor* TrainingService::ListJobs(grpc::CallbackServerContext* ctx,
                                                    const training::ListJobsRequest*,
                                                    training::ListJobsResponse* response) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  for (const auto& [id, entry] : core_->jobs().List()) {
    JobStatsToProto(id, *entry, response->add_jobs());
  }
  // Jobs being resumed are listed too: a client that lost a CreateJob's answer
  // to a crash finds (and can delete) the job that was made.
  for (const auto& [id, held] : core_->jobs().ListHeld()) {
    HeldJobToProto(id, held, response->add_jobs());
  }
  return FinishCall(ctx, OkStatus());
}

grpc::ServerWriteReactor<training::StepMetrics>* TrainingService::StreamMetrics(
    grpc::CallbackServerContext* ctx, const training::StreamMetricsRequest* request) {
  StatusOr<std::shared_ptr<JobEntry>> entry = core_->jobs().Find(request->job_id());
  Status auth = AuthorizeCall(*authorizer_, *ctx);
  if (!auth.ok() || !entry.ok()) return RefusedMetricsStream(!auth.ok() ? auth : entry.status());
  return NewMetricsStream(*entry, request->job_id(), request->from_step());
}

grpc::ServerUnaryReactor* TrainingService::DeleteJob(grpc::CallbackServerContext* ctx,
                                                     const training::DeleteJobRequest* request,
                                                     training::DeleteJobResponse*) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  const std::string id = request->job_id();
  StatusOr<std::shared_ptr<JobEntry>> removed = core_->Unpublish(id, DriverMarker(*ctx));
  if (!removed.ok()) return FinishCall(ctx, removed.status());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // Tearing down waits for the job's running operation, and the journal is a
  // file written through: off the reactor (here when shutting down). Who
  // still holds the entry (a stats call, a stream) keeps a valid, shut job.
  auto tear_down = [core = core_, id, entry = *removed, reactor] {
    core->TearDown(id, entry);
    reactor->Finish(grpc::Status::OK);
  };
  if (!background_->Post(tear_down)) tear_down();
  return reactor;
}

grpc::ServerUnaryReactor* TrainingService::JoinJob(grpc::CallbackServerContext* ctx,
                                                   const training::JoinJobRequest* request,
                                                   training::JoinJobResponse* response) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  CHORUS_FINISH_CALL_IF_ERROR(ctx, core_->CheckJoin(*request));
  if (request->check_only()) return FinishCall(ctx, OkStatus());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  FinishOn(joins_, reactor, [this, ctx, join = *request, response]() -> Status {
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<JobEntry> entry,
                            core_->Join(join, [ctx] { return ctx->IsCancelled(); }));
    for (int i : entry->job->options().interpreters) response->add_interpreters(i);
    response->set_step(entry->job->CurrentStep());
    return OkStatus();
  });
  return reactor;
}

}  // namespace chorus
