#include "chorus/server/frontends/grpc/inference_service.h"

#include <algorithm>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "chorus/common/thread_annotations.h"
#include "chorus/server/rpc/grpc_call.h"
#include "chorus/server/rpc/grpc_status.h"

namespace chorus {
namespace {

// A ModelInfer call in flight: finished from a scheduler worker; tells the
// scheduler when the client cancels.
class InferReactor final : public grpc::ServerUnaryReactor {
 public:
  InferReactor() : cancelled_(std::make_shared<std::atomic<bool>>(false)) {}
  void OnCancel() override { cancelled_->store(true); }
  void OnDone() override { delete this; }
  // Both reactions are trivial, so gRPC may run them where the call ends
  // instead of waking its executor thread for them (one thread hand-off
  // less per request; gRPC's own default reactor does the same).
  bool InternalInlineable() override { return true; }
  const std::shared_ptr<std::atomic<bool>>& cancelled() const { return cancelled_; }

 private:
  std::shared_ptr<std::atomic<bool>> cancelled_;
};

// A ModelStreamInfer call: reads requests and hands each to the core as it
// arrives; writes responses in the order they come, one write in flight at a
// time (gRPC's rule), queuing the rest. Finishes once the client has stopped
// sending and every request has ended, so no callback outlives the reactor.
// The client going away cancels every request of the stream.
class StreamInferReactor final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  StreamInferReactor(grpc::CallbackServerContext* ctx, const Authorizer& authorizer,
                     InferenceCore* core)
      : ctx_(ctx), core_(core), cancelled_(std::make_shared<std::atomic<bool>>(false)) {
    if (Status allowed = AuthorizeCall(authorizer, *ctx); !allowed.ok()) {
      Finish(ToGrpcStatus(allowed));
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed, or went away
      bool finish;
      {
        MutexLock lock(&mu_);
        reading_ = false;
        finish = ShouldFinish();
      }
      if (finish) Finish(grpc::Status::OK);
      return;
    }
    auto request = std::make_shared<inference::ModelInferRequest>(std::move(request_));
    {
      MutexLock lock(&mu_);
      ++running_;
    }
    core_->StreamInfer(
        std::move(request), ClientDeadline(*ctx_), cancelled_,
        [this](inference::ModelStreamInferResponse response) { Write(std::move(response)); },
        [this] { RequestEnded(); });
    request_.Clear();
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    const inference::ModelStreamInferResponse* next = nullptr;
    bool finish = false;
    {
      MutexLock lock(&mu_);
      if (!ok) cancelled_->store(true);
      writes_.pop_front();
      if (!writes_.empty()) {
        next = &writes_.front();  // deque elements stay put as others are added
      } else {
        writing_ = false;
        finish = ShouldFinish();
      }
    }
    if (next != nullptr) StartWrite(next);
    if (finish) Finish(grpc::Status::OK);
  }

  void OnCancel() override { cancelled_->store(true); }
  void OnDone() override { delete this; }

 private:
  // gRPC operations start outside the lock: a reaction may run inline.
  void Write(inference::ModelStreamInferResponse response) CHORUS_EXCLUDES(mu_) {
    const inference::ModelStreamInferResponse* first = nullptr;
    {
      MutexLock lock(&mu_);
      writes_.push_back(std::move(response));
      if (!writing_) {
        writing_ = true;
        first = &writes_.front();
      }
    }
    if (first != nullptr) StartWrite(first);
  }

  void RequestEnded() CHORUS_EXCLUDES(mu_) {
    bool finish;
    {
      MutexLock lock(&mu_);
      --running_;
      finish = ShouldFinish();
    }
    if (finish) Finish(grpc::Status::OK);
  }

  // True once: when nothing is read, run or written any more.
  bool ShouldFinish() CHORUS_REQUIRES(mu_) {
    if (reading_ || running_ > 0 || writing_ || finished_) return false;
    finished_ = true;
    return true;
  }

  grpc::CallbackServerContext* const ctx_;
  InferenceCore* const core_;
  const std::shared_ptr<std::atomic<bool>> cancelled_;
  inference::ModelInferRequest request_;  // the read in flight (one at a time)
  Mutex mu_;
  std::deque<inference::ModelStreamInferResponse> writes_ CHORUS_GUARDED_BY(mu_);
  bool writing_ CHORUS_GUARDED_BY(mu_) = false;
  bool reading_ CHORUS_GUARDED_BY(mu_) = true;
  int running_ CHORUS_GUARDED_BY(mu_) = 0;
  bool finished_ CHORUS_GUARDED_BY(mu_) = false;
};

// A load's parameters (Triton's): "config" (a string: the model's config in
// Triton's JSON form) and "file:<path>" (bytes: a file of the model's
// folder). INVALID_ARGUMENT, with Triton's text, for a value of another
// type; and for any other parameter, which chorus would otherwise ignore.
StatusOr<ModelOverride> LoadOverrideOf(const inference::RepositoryModelLoadRequest& request) {
  using Parameter = inference::ModelRepositoryParameter;
  ModelOverride override;
  for (const auto& [key, value] : request.parameters()) {
    if (key == "config") {
      if (value.parameter_choice_case() != Parameter::kStringParam) {
        return InvalidArgumentError(
            "invalid value type for load parameter 'config', expected string_param.");
      }
      override.config_json = value.string_param();
    } else if (key.rfind("file:", 0) == 0) {
      if (value.parameter_choice_case() != Parameter::kBytesParam) {
        return InvalidArgumentError("invalid value type for load parameter '" + key +
                                    "', expected bytes_param.");
      }
      override.files[key.substr(5)] = value.bytes_param();
    } else {
      return InvalidArgumentError("load parameter '" + key +
                                  "' is not supported: a load takes 'config' and 'file:<path>'");
    }
  }
  return override;
}

}  // namespace

// Liveness and readiness stay open without a token: orchestrators probe them.
grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* ctx,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  response->set_live(true);
  return FinishCall(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* ctx,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  response->set_ready(core_->ServerReady());
  return FinishCall(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* ctx,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  core_->ModelReady(request->name(), request->version(), [reactor, response](bool ready) {
    response->set_ready(ready);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* ctx, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  core_->ServerMetadata(response);
  return FinishCall(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* ctx, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  return FinishCall(ctx, core_->ModelMetadata(request->name(), request->version(), response));
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* ctx,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  auto* reactor = new InferReactor();
  core_->Infer(request, response, ClientDeadline(*ctx), reactor->cancelled(),
               [reactor](Status status) { reactor->Finish(ToGrpcStatus(status)); });
  return reactor;
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* ctx) {
  return new StreamInferReactor(ctx, *authorizer_, core_);
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* ctx, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  return FinishCall(ctx, core_->ModelStatistics(request->name(), request->version(), response));
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* ctx, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  return FinishCall(ctx, core_->ModelConfig(request->name(), request->version(), response));
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* ctx, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  core_->RepositoryIndex(request->ready(), response);
  return FinishCall(ctx, OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* ctx, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse*) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  StatusOr<ModelOverride> override = LoadOverrideOf(*request);
  if (!override.ok()) return FinishCall(ctx, override.status());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  core_->LoadModel(
      request->model_name(), [reactor](Status status) { reactor->Finish(ToGrpcStatus(status)); },
      std::move(*override));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* ctx, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  core_->UnloadModel(request->model_name(),
                     [reactor](Status status) { reactor->Finish(ToGrpcStatus(status)); });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  return FinishCall(ctx, core_->shared_memory().GetStatus(request->name(), response));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse*) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  return FinishCall(ctx, core_->shared_memory().Register(request->name(), request->key(),
                                                         request->offset(), request->byte_size()));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse*) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  core_->shared_memory().Unregister(request->name());
  return FinishCall(ctx, OkStatus());
}

// CUDA shared memory: chorus maps no GPU memory, so it answers these as a
// CPU-only Triton does (no regions: status lists none, unregistering is a
// no-op), so that clients which clean up first work; registering is refused.
grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryStatus(
    grpc::CallbackServerContext* ctx, const inference::CudaSharedMemoryStatusRequest* request,
    inference::CudaSharedMemoryStatusResponse*) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  if (request->name().empty()) return FinishCall(ctx, OkStatus());
  return FinishCall(
      ctx, NotFoundError("Unable to find cuda shared memory region: '" + request->name() + "'"));
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryRegister(
    grpc::CallbackServerContext* ctx, const inference::CudaSharedMemoryRegisterRequest* request,
    inference::CudaSharedMemoryRegisterResponse*) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  return FinishCall(
      ctx, InvalidArgumentError("failed to register shared memory region '" + request->name() +
                                "': chorus serves no CUDA shared memory (system shared memory is "
                                "served: SystemSharedMemoryRegister)"));
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryUnregister(
    grpc::CallbackServerContext* ctx, const inference::CudaSharedMemoryUnregisterRequest*,
    inference::CudaSharedMemoryUnregisterResponse*) {
  CHORUS_FINISH_CALL_IF_ERROR(ctx, AuthorizeCall(*authorizer_, *ctx));
  return FinishCall(ctx, OkStatus());
}

}  // namespace chorus
