#include "server/src/inference_service.h"

#include "server/src/grpc_status.h"

namespace chorus {
namespace {

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
  response->set_ready(core_->ModelReady(request->name(), request->version()));
  return Finish(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* ctx, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  core_->ServerMetadata(response);
  return Finish(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* ctx, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  return Finish(ctx, core_->ModelMetadata(request->name(), request->version(), response));
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* ctx,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  auto* reactor = new InferReactor();
  core_->Infer(request, response, ClientDeadline(*ctx), reactor->cancelled(),
               [reactor](Status status) { reactor->Finish(ToGrpcStatus(status)); });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* ctx, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  return Finish(ctx, core_->ModelStatistics(request->name(), request->version(), response));
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* ctx, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  return Finish(ctx, core_->ModelConfig(request->name(), request->version(), response));
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* ctx, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  core_->RepositoryIndex(request->ready(), response);
  return Finish(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* ctx, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse*) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  core_->LoadModel(request->model_name(),
                   [reactor](Status status) { reactor->Finish(ToGrpcStatus(status)); });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* ctx, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  CHORUS_RETURN_IF_ERROR_REACTOR(ctx, context_->Authorize(*ctx));
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  core_->UnloadModel(request->model_name(),
                     [reactor](Status status) { reactor->Finish(ToGrpcStatus(status)); });
  return reactor;
}

}  // namespace chorus
