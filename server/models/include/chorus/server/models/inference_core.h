// server/models/: what a served model is and how a request reaches it,
// without a transport: the inference core (this header), the repository and
// each model's lifecycle (model_repository.h: layout, loader, ModelState),
// loaded models and their statistics, config.json (model_config.h), the
// tensor codec and Triton's view of a model. The frontends and the training
// service call it; it calls serving/.
//
// The Open Inference Protocol's operations with no transport: the gRPC
// service and the HTTP/REST endpoints both convert their request to the
// protocol's messages, hand it here, and convert the answer back. So both
// validate alike, share one scheduler per model and report the same errors.
// Authorization is the transports' (they see the credentials).
#ifndef CHORUS_SERVER_MODELS_INFERENCE_CORE_H_
#define CHORUS_SERVER_MODELS_INFERENCE_CORE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chorus/common/background_runner.h"
#include "chorus/common/status.h"
#include "chorus/inference/grpc_service.pb.h"
#include "chorus/interpreter/model_calls.h"
#include "chorus/server/models/model_repository.h"
#include "chorus/server/models/response_cache.h"
#include "chorus/server/models/shared_memory.h"

namespace chorus {

// A repository call's load or unload, as InferenceCoreOptions::change_repository gets it.
struct RepositoryChange {
  bool load = true;  // false: an unload
  std::string model;
  ModelOverride override;  // a load's config and files (Triton's load parameters)
};

struct InferenceCoreOptions {
  // 0: only the client's deadline.
  std::chrono::milliseconds request_timeout{0};
  // Triton's strict readiness: the server is ready only while every model of
  // the repository that should serve does (quarantined ones aside).
  bool strict_readiness = true;
  // The response cache's budget (response_cache.h); 0: no cache.
  size_t cache_size_bytes = 0;
  // Non-empty: why LoadModel and UnloadModel are refused (FAILED_PRECONDITION):
  // the server's model control mode leaves the repository to itself.
  std::string repository_calls_refused;
  // Set (a server of several serving processes): LoadModel and UnloadModel
  // hand their change to this function, on the background runner, instead
  // of changing this process's repository (every process carries it out); it
  // calls `done` exactly once, from any thread, with the outcome.
  std::function<void(RepositoryChange change, std::function<void(Status)> done)> change_repository;
};

class InferenceCore {
 public:
  using Clock = std::chrono::steady_clock;

  // Both outlive the core; `background` runs repository loads and unloads.
  InferenceCore(ModelRepository* repository, BackgroundRunner* background,
                InferenceCoreOptions options)
      : repository_(repository),
        background_(background),
        options_(options),
        cache_(options.cache_size_bytes > 0
                   ? std::make_unique<ResponseCache>(options.cache_size_bytes)
                   : nullptr) {}

  // Whether calls are taken: false until the server has started and again
  // once it drains. Any thread.
  void SetAccepting(bool accepting) { accepting_.store(accepting); }
  bool accepting() const { return accepting_.load(); }
  // ServerReady's answer, and /v2/health/ready's: accepting, and (strict
  // readiness) every model that should serve does.
  bool ServerReady() const;

  // The server's name, version and protocol extensions.
  void ServerMetadata(inference::ServerMetadataResponse* response) const;

  // Whether version `version` ("" = the newest) of `name` serves now.
  bool ModelReady(const std::string& name, const std::string& version) const;
  // ModelReady, and for a Triton Python-backend model whose class has an
  // is_ready(), its instances' answer too: `done` at once, or later from the
  // model's own thread (never blocks the caller: gRPC's reactors call it).
  void ModelReady(const std::string& name, const std::string& version,
                  std::function<void(bool)> done) const;

  // Each fills `response` for `name`/`version` ("" = the newest; "" name for
  // statistics = every loaded model). NOT_FOUND for a model that is not loaded
  // (ModelRepository::Find's errors). Metadata lists `version`, or with none
  // every version that serves.
  Status ModelMetadata(const std::string& name, const std::string& version,
                       inference::ModelMetadataResponse* response) const;
  Status ModelConfig(const std::string& name, const std::string& version,
                     inference::ModelConfigResponse* response) const;
  Status ModelStatistics(const std::string& name, const std::string& version,
                         inference::ModelStatisticsResponse* response) const;

  // The repository's models and their states (only READY ones if `ready_only`).
  void RepositoryIndex(bool ready_only, inference::RepositoryIndexResponse* response) const;

  // Loads (or unloads) `name` on the background thread, since a load can take
  // seconds; `done` gets the result there (ModelRepository::Load's errors),
  // or at once (UNAVAILABLE) when the server is shutting down, or
  // (FAILED_PRECONDITION) when the server's model control mode refuses it.
  // `override` is a load call's config and files (Triton's load parameters
  // "config", "file:<path>"), for that load. Unloading a model that is not
  // loaded, or not in the repository, is OK (Triton's). With
  // options.change_repository, the change goes there (`done` comes from it).
  void LoadModel(std::string name, std::function<void(Status)> done, ModelOverride override = {});
  void UnloadModel(std::string name, std::function<void(Status)> done);

  // Validates `*request` against the model's signature and queues it on the
  // model's scheduler, ending at the earlier of `deadline` and the server's
  // request timeout; `cancelled` (optional) is set when the client goes away.
  // `done` is called exactly once, on a scheduler worker or at once (invalid
  // request, unknown model, not ready), after `*response` is filled when OK.
  // `request` and `response` must stay valid until then.
  void Infer(const inference::ModelInferRequest* request, inference::ModelInferResponse* response,
             Clock::time_point deadline, std::shared_ptr<std::atomic<bool>> cancelled,
             std::function<void(Status)> done);

  // One request of a ModelStreamInfer stream. A decoupled model's responses
  // go to `respond` as the model yields them, then, if the request asked for
  // it ("triton_enable_empty_final_response"), an empty one flagged
  // "triton_final_response"; another model's one response is flagged final.
  // Errors go to `respond` too (error_message set). `respond` is called from
  // a scheduler worker, or at once; then `done`, exactly once.
  void StreamInfer(std::shared_ptr<const inference::ModelInferRequest> request,
                   Clock::time_point deadline, std::shared_ptr<std::atomic<bool>> cancelled,
                   std::function<void(inference::ModelStreamInferResponse)> respond,
                   std::function<void()> done);

  // Hands `call` (prompt or chat messages, sampling parameters, callbacks) to
  // the engines of generative model `name`'s newest version, its deadline
  // capped by the server's request timeout. An unknown model (NOT_FOUND), one
  // that does not generate (INVALID_ARGUMENT) or a server not ready
  // (UNAVAILABLE) reach call.done at once.
  void GenerateText(const std::string& name, GenerationRequest call);

  // The generative models that serve now, by name (OpenAI's model list).
  std::vector<std::shared_ptr<LoadedModel>> GenerativeModels() const;

  // Model code's calls to served models (chorus.serving.infer), for the
  // interpreters (InterpreterManager::SetModelCallHandler); the handler calls
  // this core, so uninstall it before the core goes.
  std::shared_ptr<ModelCallHandler> ModelCalls();
  // One such call: `call.model` found, its inputs checked by name, run
  // through CallModel with the caller's deadline, cancellation and call path;
  // `done` gets the outputs asked for (all when none) by name, and the
  // answer's parameters; a stream's error responses go to its on_response.
  void CallInProcess(ModelCall call, std::function<void(StatusOr<CallResponse>)> done) const;
  // Model code's repository calls (Triton's pb_utils.load_model, unload_model,
  // is_model_ready). A load asked for while the repository's own thread runs
  // (from a model's initialize()) runs there, at once, rather than after it.
  void LoadFromModelCode(ModelLoadRequest load, std::function<void(Status)> done);
  void UnloadFromModelCode(std::string model, std::function<void(Status)> done);
  // Whether `model` (version `version`, "" the newest) serves; NOT_FOUND for
  // a model the repository does not have.
  StatusOr<bool> ModelReadyForModelCode(const std::string& model, const std::string& version) const;

  // The system shared memory regions requests may name (Triton's extension);
  // registered and unregistered by the transports' calls, all unmapped with
  // the core. Thread-safe.
  SharedMemoryRegistry& shared_memory() { return shared_memory_; }

 private:
  // The model `request` names, if the server serves and has it loaded.
  StatusOr<std::shared_ptr<LoadedModel>> ServingModel(
      const inference::ModelInferRequest& request) const;
  // `request` checked (outputs asked, queue parameters) for `model`'s
  // scheduler, its inputs not yet decoded, ending at the earlier of
  // `deadline` and the server's request timeout; a refused request is counted
  // in the model's statistics.
  StatusOr<InferenceRequest> CheckCall(LoadedModel& model,
                                       const inference::ModelInferRequest& request,
                                       Clock::time_point deadline,
                                       std::shared_ptr<std::atomic<bool>> cancelled,
                                       Clock::time_point start) const;
  // Decodes `request`'s inputs into `call`; a refused request is counted.
  Status DecodeCallInputs(LoadedModel& model, const inference::ModelInferRequest& request,
                          Clock::time_point start, InferenceRequest* call) const;
  // CheckCall, then DecodeCallInputs.
  StatusOr<InferenceRequest> PrepareCall(LoadedModel& model,
                                         const inference::ModelInferRequest& request,
                                         Clock::time_point deadline,
                                         std::shared_ptr<std::atomic<bool>> cancelled,
                                         Clock::time_point start) const;
  // What the response cache had for a request: nothing to look up (empty
  // key: no cache, or the model does not use it), a hit (`response` filled
  // with its outputs), or a miss whose answer is to be kept under `key`.
  struct CacheLookup {
    std::string key;
    bool hit = false;
    Clock::duration spent{0};
  };
  // Keyed by the decoded `inputs`, or with none by the request's wire bytes
  // (no key when those cannot be read without decoding).
  CacheLookup LookUpCache(const LoadedModel& model, const inference::ModelInferRequest& request,
                          const std::vector<c10::IValue>* inputs,
                          inference::ModelInferResponse* response) const;
  // Counts `status`, a request refused before it ran, in `model`'s statistics; returns it.
  static Status Refused(LoadedModel& model, Status status, Clock::time_point start);
  // `call` on `model` (one with a scheduler, or an ensemble) for an
  // ensemble's step or an in-process model call, recorded in the model's
  // statistics; `done` exactly once. A call to a model already on
  // call.call_path (a cycle), or one that streams or keeps sequences, is refused.
  // `caller_waits`: the calling thread would only wait for the answer (an
  // in-process call, never a reactor's thread), so it may run the model
  // itself (ModelScheduler::SubmitOrRun).
  void CallModel(std::shared_ptr<LoadedModel> model, InferenceRequest call,
                 ModelScheduler::Done done, bool caller_waits = false) const;
  // `call` through the steps of ensemble `model`; `done` exactly once.
  void RunEnsemble(const LoadedModel& model, InferenceRequest call,
                   ModelScheduler::Done done) const;
  // `result` (OK) into `response`: its header, outputs (reshaped as clients
  // see them) and parameters.
  Status EncodeAnswer(const LoadedModel& model, const inference::ModelInferRequest& request,
                      InferenceResult* result, inference::ModelInferResponse* response) const;
  // Infer, on a model already found and not decoupled.
  void InferOnce(std::shared_ptr<LoadedModel> model, const inference::ModelInferRequest* request,
                 inference::ModelInferResponse* response, Clock::time_point deadline,
                 std::shared_ptr<std::atomic<bool>> cancelled, std::function<void(Status)> done);
  // StreamInfer on a decoupled model: each response as the model yields it.
  void StreamDecoupled(std::shared_ptr<LoadedModel> model,
                       std::shared_ptr<const inference::ModelInferRequest> request,
                       Clock::time_point deadline, std::shared_ptr<std::atomic<bool>> cancelled,
                       std::function<void(inference::ModelStreamInferResponse)> respond,
                       std::function<void()> done);
  // `call` on `model`'s engines, recorded in its statistics.
  void SubmitGeneration(std::shared_ptr<LoadedModel> model, GenerationRequest call) const;
  void ChangeRepository(std::function<Status()> change, std::function<void(Status)> done);
  // LoadModel's and UnloadModel's change to options_.change_repository, on
  // the background runner.
  void HandOver(RepositoryChange change, std::function<void(Status)> done);
  // A generative model's request: its text goes to the generation engines;
  // each chunk becomes a response through `respond` (final flagged), or, with
  // no `respond`, the whole text one response in `*response`.
  void Generate(std::shared_ptr<LoadedModel> model,
                std::shared_ptr<const inference::ModelInferRequest> request,
                inference::ModelInferResponse* response, Clock::time_point deadline,
                std::shared_ptr<std::atomic<bool>> cancelled,
                std::function<void(inference::ModelStreamInferResponse)> respond,
                std::function<void(Status)> done);

  ModelRepository* const repository_;
  BackgroundRunner* const background_;
  const InferenceCoreOptions options_;
  std::atomic<bool> accepting_{false};
  SharedMemoryRegistry shared_memory_;
  const std::unique_ptr<ResponseCache> cache_;  // null without --cache-size-bytes
};

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_INFERENCE_CORE_H_
