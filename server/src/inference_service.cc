#include "server/src/inference_service.h"

#include "chorus/common/logging.h"
#include "server/src/grpc_status.h"
#include "server/src/tensor_codec.h"
#include "server/src/triton_model_config.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kServerName[] = "chorus";
constexpr char kServerVersion[] = "0.1.0";

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx, const Status& status) {
  return FinishCall(ctx, status);
}

// Finishes the call with `expr`'s error, if any.
#define CHORUS_RETURN_IF_ERROR_REACTOR(ctx, expr)                 \
  do {                                                            \
    ::chorus::Status chorus_status_ = (expr);                     \
    if (!chorus_status_.ok()) return Finish(ctx, chorus_status_); \
  } while (0)

// A ModelInfer call in flight: finished from a scheduler worker; tells the
// scheduler when the client cancels.
class InferReactor final : public grpc::ServerUnaryReactor {
 public:
  InferReactor() : cancelled_(std::make_shared<std::atomic<bool>>(false)) {}
  void OnCancel() override { cancelled_->store(true); }
  void OnDone() override { delete this; }
  const std::shared_ptr<std::atomic<bool>>& cancelled() const { return cancelled_; }

 private:
  std::shared_ptr<std::atomic<bool>> cancelled_;
};

// The earlier of the client's deadline and the server's request timeout.
Clock::time_point DeadlineOf(grpc::CallbackServerContext* ctx, std::chrono::milliseconds timeout) {
  Clock::time_point deadline = ClientDeadline(*ctx);
  if (timeout.count() > 0) deadline = std::min(deadline, Clock::now() + timeout);
  return deadline;
}

void FillDuration(const ModelStatsSnapshot::Duration& from, inference::StatisticDuration* to) {
  to->set_count(from.count);
  to->set_ns(from.ns);
}

}  // namespace

// Liveness and readiness stay open without a token: orchestrators probe them.
grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* ctx,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  response->set_live(true);
  return Finish(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* ctx,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  response->set_ready(context_->Ready());
  return Finish(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* ctx,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  response->set_ready(context_->ready.load() &&
                      context_->repository->Find(request->name(), request->version()).ok());
  return Finish(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* ctx, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  response->set_name(kServerName);
  response->set_version(kServerVersion);
  for (const char* extension : {"model_repository", "statistics", "binary_tensor_data"}) {
    response->add_extensions(extension);
  }
  return Finish(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* ctx, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  auto model = context_->repository->Find(request->name(), request->version());
  if (!model.ok()) return Finish(ctx, model.status());
  const Manifest& manifest = (*model)->manifest();
  response->set_name((*model)->name());
  response->add_versions((*model)->version());
  response->set_platform(PlatformName((*model)->model().kind()));
  auto fill = [](const TensorSpec& spec, inference::ModelMetadataResponse::TensorMetadata* out) {
    out->set_name(spec.name);
    out->set_datatype(WireDatatype(spec.dtype));
    for (int64_t d : spec.shape) out->add_shape(d);
  };
  for (const TensorSpec& spec : manifest.inputs) fill(spec, response->add_inputs());
  for (const TensorSpec& spec : manifest.outputs) fill(spec, response->add_outputs());
  return Finish(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* ctx,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  const Clock::time_point start = Clock::now();
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  if (!context_->ready.load()) return Finish(ctx, UnavailableError("the server is not ready"));
  auto found = context_->repository->Find(request->model_name(), request->model_version());
  if (!found.ok()) return Finish(ctx, found.status());
  std::shared_ptr<LoadedModel> model = *found;
  StatusOr<std::vector<at::Tensor>> inputs = DecodeInputs(*request, model->manifest());
  if (!inputs.ok()) {
    InferenceResult rejected;
    rejected.status = inputs.status();
    model->RecordRequest(rejected, Clock::now() - start);
    return Finish(ctx, inputs.status());
  }
  auto* reactor = new InferReactor();
  InferenceRequest call;
  call.id = request->id();
  call.inputs = std::move(*inputs);
  call.deadline = DeadlineOf(ctx, context_->request_timeout);
  call.cancelled = reactor->cancelled();
  model->scheduler().Submit(
      std::move(call), [model, request, response, reactor, start](InferenceResult result) {
        Status status = result.status;
        if (status.ok()) {
          response->set_model_name(model->name());
          response->set_model_version(model->version());
          response->set_id(request->id());
          status = EncodeOutputs(result.outputs, model->manifest(), *request, response);
        }
        model->RecordRequest(result, Clock::now() - start);
        reactor->Finish(ToGrpcStatus(status));
      });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* ctx, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  std::vector<std::shared_ptr<LoadedModel>> models;
  if (request->name().empty()) {
    models = context_->repository->Loaded();
  } else {
    auto model = context_->repository->Find(request->name(), request->version());
    if (!model.ok()) return Finish(ctx, model.status());
    models.push_back(*model);
  }
  for (const auto& model : models) {
    ModelStatsSnapshot stats = model->Snapshot();
    auto* out = response->add_model_stats();
    out->set_name(model->name());
    out->set_version(model->version());
    out->set_last_inference(stats.last_inference_ms);
    out->set_inference_count(stats.inference_count);
    out->set_execution_count(stats.execution_count);
    auto* infer = out->mutable_inference_stats();
    FillDuration(stats.success, infer->mutable_success());
    FillDuration(stats.fail, infer->mutable_fail());
    FillDuration(stats.queue, infer->mutable_queue());
    FillDuration(stats.compute_infer, infer->mutable_compute_infer());
    // Decoding and encoding tensors are not timed apart from the model's run:
    // Triton's tools require the three compute counts to agree.
    infer->mutable_compute_input()->set_count(stats.compute_infer.count);
    infer->mutable_compute_output()->set_count(stats.compute_infer.count);
    for (const auto& [size, duration] : stats.batches) {
      auto* batch = out->add_batch_stats();
      batch->set_batch_size(size);
      FillDuration(duration, batch->mutable_compute_infer());
    }
  }
  return Finish(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* ctx, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  auto model = context_->repository->Find(request->name(), request->version());
  if (!model.ok()) return Finish(ctx, model.status());
  FillTritonModelConfig(**model, response->mutable_config());
  return Finish(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* ctx, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  for (const RepositoryEntry& entry : context_->repository->Index()) {
    if (request->ready() && entry.state != "READY") continue;
    auto* model = response->add_models();
    model->set_name(entry.name);
    model->set_version(entry.version);
    model->set_state(entry.state);
    model->set_reason(entry.reason);
  }
  return Finish(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* ctx, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse*) {
  return ChangeRepository(ctx, request->model_name(),
                          [](ModelRepository& r, const std::string& name) { return r.Load(name); });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* ctx, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  return ChangeRepository(
      ctx, request->model_name(),
      [](ModelRepository& r, const std::string& name) { return r.Unload(name); });
}

grpc::ServerUnaryReactor* InferenceService::ChangeRepository(
    grpc::CallbackServerContext* ctx, std::string name,
    std::function<Status(ModelRepository&, const std::string&)> change) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ModelRepository* repository = context_->repository;
  if (!context_->background->Post([repository, reactor, name = std::move(name), change] {
        reactor->Finish(ToGrpcStatus(change(*repository, name)));
      })) {
    reactor->Finish(ToGrpcStatus(UnavailableError("the server is shutting down")));
  }
  return reactor;
}

}  // namespace chorus
