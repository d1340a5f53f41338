#include "chorus/server/models/inference_core.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "chorus/server/models/infer_parameters.h"
#include "chorus/server/models/model_repository.h"
#include "chorus/server/models/tensor_codec.h"
#include "chorus/server/models/triton_model_config.h"
#include "server/models/src/inference_core_internal.h"
#include "server/models/src/request_attributes.h"

namespace chorus {
namespace {

constexpr char kServerName[] = "chorus";
constexpr char kServerVersion[] = "0.1.0";

void FillDuration(const ModelStatsSnapshot::Duration& from, inference::StatisticDuration* to) {
  to->set_count(from.count);
  to->set_ns(from.ns);
}

void FillStatistics(const LoadedModel& model, inference::ModelStatistics* out) {
  ModelStatsSnapshot stats = model.Snapshot();
  out->set_name(model.name());
  out->set_version(model.version());
  out->set_last_inference(stats.last_inference_ms);
  out->set_inference_count(stats.inference_count);
  out->set_execution_count(stats.execution_count);
  auto* infer = out->mutable_inference_stats();
  FillDuration(stats.success, infer->mutable_success());
  FillDuration(stats.fail, infer->mutable_fail());
  FillDuration(stats.queue, infer->mutable_queue());
  FillDuration(stats.compute_infer, infer->mutable_compute_infer());
  FillDuration(stats.cache_hit, infer->mutable_cache_hit());
  FillDuration(stats.cache_miss, infer->mutable_cache_miss());
  // Each request's decoding and encoding, counted as its runs are: Triton's
  // tools require the three compute counts to agree.
  FillDuration({stats.compute_infer.count, stats.compute_input_ns}, infer->mutable_compute_input());
  FillDuration({stats.compute_infer.count, stats.compute_output_ns},
               infer->mutable_compute_output());
  for (const auto& [size, duration] : stats.batches) {
    auto* batch = out->add_batch_stats();
    batch->set_batch_size(size);
    FillDuration(duration, batch->mutable_compute_infer());
  }
}

// `call` in the sequence its request names (parameters sequence_id: a
// number or a string, sequence_start, sequence_end; Triton's).
StatusOr<SequenceRequest> SequenceOf(const inference::ModelInferRequest& request,
                                     InferenceRequest call) {
  SequenceRequest in_sequence;
  const auto& parameters = request.parameters();
  in_sequence.id = uint64_t{0};
  if (auto id = parameters.find("sequence_id"); id != parameters.end()) {
    const inference::InferParameter& value = id->second;
    switch (value.parameter_choice_case()) {
      case inference::InferParameter::kInt64Param:
        if (value.int64_param() < 0) {
          return InvalidArgumentError("sequence_id " + std::to_string(value.int64_param()) +
                                      " is negative");
        }
        in_sequence.id = static_cast<uint64_t>(value.int64_param());
        break;
      case inference::InferParameter::kUint64Param:
        in_sequence.id = value.uint64_param();
        break;
      case inference::InferParameter::kStringParam:
        in_sequence.id = value.string_param();
        break;
      default:
        return InvalidArgumentError("sequence_id must be an integer or a string");
    }
  }
  in_sequence.start = BoolParameter(parameters, "sequence_start");
  in_sequence.end = BoolParameter(parameters, "sequence_end");
  in_sequence.call = std::move(call);
  return in_sequence;
}

// The request's "priority" (checked against the model's levels; none given:
// 0) and "timeout" (microseconds in the queue; the model's policy decides) parameters.
Status ReadQueueParameters(const inference::ModelInferRequest& request,
                           const PriorityOptions& priorities, InferenceRequest* call) {
  const auto& parameters = request.parameters();
  auto number = [&](const char* key) -> std::optional<int64_t> {
    auto it = parameters.find(key);
    if (it == parameters.end()) return std::nullopt;
    if (it->second.parameter_choice_case() == inference::InferParameter::kUint64Param) {
      return static_cast<int64_t>(std::min<uint64_t>(it->second.uint64_param(), INT64_MAX));
    }
    return it->second.int64_param();
  };
  if (std::optional<int64_t> priority = number("priority"); priority && priorities.levels > 0) {
    if (*priority < 0 || *priority > priorities.levels) {
      return InvalidArgumentError("priority " + std::to_string(*priority) +
                                  " is out of range: the model's levels are 1 (first) to " +
                                  std::to_string(priorities.levels) + ", 0 for its default");
    }
    call->priority = static_cast<int>(*priority);
  }
  if (std::optional<int64_t> timeout = number("timeout"); timeout && *timeout > 0) {
    call->timeout = std::chrono::microseconds(*timeout);
  }
  return OkStatus();
}

}  // namespace

namespace core_internal {

// The outputs of a model that answers its requests itself go out as it gave
// them (Triton's, for its Python backend).
OutputCheck OutputCheckOf(const LoadedModel& model) {
  return model.executor() != nullptr ? OutputCheck::kAsReturned : OutputCheck::kSignature;
}

// Who answers: the model, its version and the request's id.
void FillResponseHeader(const LoadedModel& model, const inference::ModelInferRequest& request,
                        inference::ModelInferResponse* response) {
  response->set_model_name(model.name());
  response->set_model_version(model.version());
  response->set_id(request.id());
}

}  // namespace core_internal

using core_internal::FillResponseHeader;
using core_internal::OutputCheckOf;

void InferenceCore::ServerMetadata(inference::ServerMetadataResponse* response) const {
  response->set_name(kServerName);
  response->set_version(kServerVersion);
  for (const char* extension : {"model_repository", "statistics", "binary_tensor_data",
                                "classification", "system_shared_memory"}) {
    response->add_extensions(extension);
  }
}

bool InferenceCore::ServerReady() const {
  return accepting() && (!options_.strict_readiness || repository_->AllLoaded());
}

bool InferenceCore::ModelReady(const std::string& name, const std::string& version) const {
  return accepting() && repository_->Find(name, version).ok();
}

void InferenceCore::ModelReady(const std::string& name, const std::string& version,
                               std::function<void(bool)> done) const {
  StatusOr<std::shared_ptr<LoadedModel>> model = repository_->Find(name, version);
  if (!accepting() || !model.ok()) return done(false);
  PythonBackendModel* python = (*model)->python_backend();
  if (python == nullptr) return done(true);
  // `model` rides along: the check runs on the model, which must outlive it.
  python->CheckReady(
      [model = std::move(*model), done = std::move(done)](bool ready) { done(ready); });
}

Status InferenceCore::ModelMetadata(const std::string& name, const std::string& version,
                                    inference::ModelMetadataResponse* response) const {
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<LoadedModel> model, repository_->Find(name, version));
  const Manifest& manifest = model->manifest();
  response->set_name(model->name());
  if (!version.empty()) {
    response->add_versions(model->version());
  } else {
    for (const std::string& ready : repository_->ReadyVersions(name)) response->add_versions(ready);
    if (response->versions().empty()) response->add_versions(model->version());  // just unloaded
  }
  response->set_platform(model->platform());
  auto fill = [](const TensorSpec& spec, inference::ModelMetadataResponse::TensorMetadata* out) {
    out->set_name(spec.name);
    out->set_datatype(WireDatatype(spec.dtype));
    for (int64_t d : spec.shape) out->add_shape(d);
  };
  for (const TensorSpec& spec : manifest.inputs) fill(spec, response->add_inputs());
  for (const TensorSpec& spec : manifest.outputs) fill(spec, response->add_outputs());
  return OkStatus();
}

Status InferenceCore::ModelConfig(const std::string& name, const std::string& version,
                                  inference::ModelConfigResponse* response) const {
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<LoadedModel> model, repository_->Find(name, version));
  // A config.pbtxt's model answers its own config, as Triton normalized it.
  if (model->triton_config() != nullptr) {
    *response->mutable_config() = *model->triton_config();
  } else {
    FillTritonModelConfig(*model, response->mutable_config());
  }
  return OkStatus();
}

Status InferenceCore::ModelStatistics(const std::string& name, const std::string& version,
                                      inference::ModelStatisticsResponse* response) const {
  std::vector<std::shared_ptr<LoadedModel>> models;
  if (name.empty()) {
    models = repository_->Loaded();
  } else {
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<LoadedModel> model, repository_->Find(name, version));
    models.push_back(std::move(model));
  }
  for (const auto& model : models) FillStatistics(*model, response->add_model_stats());
  return OkStatus();
}

void InferenceCore::RepositoryIndex(bool ready_only,
                                    inference::RepositoryIndexResponse* response) const {
  for (const RepositoryEntry& entry : repository_->Index()) {
    if (ready_only && entry.state != ModelState::kReady) continue;
    auto* model = response->add_models();
    model->set_name(entry.name);
    model->set_version(entry.version);
    model->set_state(ModelStateName(entry.state));
    model->set_reason(entry.reason);
  }
}

void InferenceCore::LoadModel(std::string name, std::function<void(Status)> done,
                              ModelOverride override) {
  if (!options_.repository_calls_refused.empty()) {
    return done(
        FailedPreconditionError("cannot load " + name + ": " + options_.repository_calls_refused));
  }
  if (options_.change_repository) {
    return HandOver({true, std::move(name), std::move(override)}, std::move(done));
  }
  ModelRepository* repository = repository_;
  ChangeRepository([repository, name = std::move(name),
                    override = std::move(override)] { return repository->Load(name, override); },
                   std::move(done));
}

void InferenceCore::UnloadModel(std::string name, std::function<void(Status)> done) {
  if (!options_.repository_calls_refused.empty()) {
    return done(FailedPreconditionError("cannot unload " + name + ": " +
                                        options_.repository_calls_refused));
  }
  if (options_.change_repository) return HandOver({false, std::move(name), {}}, std::move(done));
  ModelRepository* repository = repository_;
  ChangeRepository(
      [repository, name = std::move(name)] {
        Status unloaded = repository->Unload(name);
        // Nothing of it loaded: nothing to do (Triton answers OK).
        return unloaded.code() == StatusCode::kNotFound ? OkStatus() : unloaded;
      },
      std::move(done));
}

void InferenceCore::ChangeRepository(std::function<Status()> change,
                                     std::function<void(Status)> done) {
  // Post drops the work unrun when it refuses it, so `done` is shared.
  auto finish = std::make_shared<std::function<void(Status)>>(std::move(done));
  if (!background_->Post([change = std::move(change), finish] { (*finish)(change()); })) {
    (*finish)(UnavailableError("the server is shutting down"));
  }
}

void InferenceCore::HandOver(RepositoryChange change, std::function<void(Status)> done) {
  // The override's files are written out there: not on a reactor's thread.
  auto finish = std::make_shared<std::function<void(Status)>>(std::move(done));
  const bool posted =
      background_->Post([hand_over = options_.change_repository, change = std::move(change),
                         finish]() mutable { hand_over(std::move(change), std::move(*finish)); });
  if (!posted) (*finish)(UnavailableError("the server is shutting down"));
}

StatusOr<std::shared_ptr<LoadedModel>> InferenceCore::ServingModel(
    const inference::ModelInferRequest& request) const {
  if (!accepting()) return UnavailableError("the server is not ready");
  return repository_->Find(request.model_name(), request.model_version());
}

StatusOr<InferenceRequest> InferenceCore::CheckCall(LoadedModel& model,
                                                    const inference::ModelInferRequest& request,
                                                    Clock::time_point deadline,
                                                    std::shared_ptr<std::atomic<bool>> cancelled,
                                                    Clock::time_point start) const {
  InferenceRequest call;
  Status checked = CheckRequestedOutputs(request, model.manifest());
  if (checked.ok()) checked = ReadQueueParameters(request, model.scheduling().priorities, &call);
  if (!checked.ok()) return Refused(model, std::move(checked), start);
  call.id = request.id();
  if (model.executor() != nullptr) SetRequestAttributes(model, request, &call);
  call.deadline = deadline;
  if (options_.request_timeout.count() > 0) {
    call.deadline = std::min(deadline, start + options_.request_timeout);
  }
  call.cancelled = std::move(cancelled);
  return call;
}

Status InferenceCore::DecodeCallInputs(LoadedModel& model,
                                       const inference::ModelInferRequest& request,
                                       Clock::time_point start, InferenceRequest* call) const {
  StatusOr<std::vector<c10::IValue>> inputs =
      DecodeInputs(request, model.manifest(), &shared_memory_);
  if (!inputs.ok()) return Refused(model, inputs.status(), start);
  if (Status reshaped = ReshapeInputs(model, &*inputs); !reshaped.ok()) {
    return Refused(model, reshaped, start);
  }
  call->inputs = std::move(*inputs);
  return OkStatus();
}

StatusOr<InferenceRequest> InferenceCore::PrepareCall(LoadedModel& model,
                                                      const inference::ModelInferRequest& request,
                                                      Clock::time_point deadline,
                                                      std::shared_ptr<std::atomic<bool>> cancelled,
                                                      Clock::time_point start) const {
  StatusOr<InferenceRequest> call =
      CheckCall(model, request, deadline, std::move(cancelled), start);
  if (!call.ok()) return call;
  CHORUS_RETURN_IF_ERROR(DecodeCallInputs(model, request, start, &*call));
  return call;
}

Status InferenceCore::Refused(LoadedModel& model, Status status, Clock::time_point start) {
  InferenceResult rejected;
  rejected.status = status;
  model.RecordRequest(rejected, Clock::now() - start);
  return status;
}

void InferenceCore::Infer(const inference::ModelInferRequest* request,
                          inference::ModelInferResponse* response, Clock::time_point deadline,
                          std::shared_ptr<std::atomic<bool>> cancelled,
                          std::function<void(Status)> done) {
  StatusOr<std::shared_ptr<LoadedModel>> model = ServingModel(*request);
  if (!model.ok()) return done(model.status());
  if ((*model)->generation() != nullptr) {
    // The caller keeps `request` alive until done: an unowned shared_ptr.
    std::shared_ptr<const inference::ModelInferRequest> unowned(
        request, [](const inference::ModelInferRequest*) {});
    return Generate(std::move(*model), std::move(unowned), response, deadline, std::move(cancelled),
                    nullptr, std::move(done));
  }
  if ((*model)->scheduling().decoupled) {
    return done(InvalidArgumentError("model \"" + (*model)->name() +
                                     "\" is decoupled (it streams responses): call "
                                     "ModelStreamInfer"));
  }
  InferOnce(std::move(*model), request, response, deadline, std::move(cancelled), std::move(done));
}

InferenceCore::CacheLookup InferenceCore::LookUpCache(
    const LoadedModel& model, const inference::ModelInferRequest& request,
    const std::vector<c10::IValue>* inputs, inference::ModelInferResponse* response) const {
  CacheLookup lookup;
  if (cache_ == nullptr || !model.response_cache()) return lookup;
  for (const auto& output : request.outputs()) {  // answers written into shared memory
    if (output.parameters().count("shared_memory_region")) return lookup;
  }
  const Clock::time_point start = Clock::now();
  if (inputs != nullptr) {
    lookup.key = ResponseCache::Key(model.serial(), model.manifest(), request, *inputs);
  } else if (std::optional<std::string> key =
                 ResponseCache::WireKey(model.serial(), model.manifest(), request)) {
    lookup.key = std::move(*key);
  }
  if (!lookup.key.empty()) lookup.hit = cache_->Lookup(lookup.key, response);
  lookup.spent = Clock::now() - start;
  return lookup;
}

Status InferenceCore::EncodeAnswer(const LoadedModel& model,
                                   const inference::ModelInferRequest& request,
                                   InferenceResult* result,
                                   inference::ModelInferResponse* response) const {
  FillResponseHeader(model, request, response);
  CHORUS_RETURN_IF_ERROR(ReshapeOutputs(model, &result->outputs));
  CHORUS_RETURN_IF_ERROR(EncodeOutputs(result->outputs, model.manifest(), request, response,
                                       model.annotations().output_labels, &shared_memory_,
                                       OutputCheckOf(model)));
  SetParameters(result->parameters, response->mutable_parameters());
  return OkStatus();
}

void InferenceCore::InferOnce(std::shared_ptr<LoadedModel> model,
                              const inference::ModelInferRequest* request,
                              inference::ModelInferResponse* response, Clock::time_point deadline,
                              std::shared_ptr<std::atomic<bool>> cancelled,
                              std::function<void(Status)> done) {
  const Clock::time_point start = Clock::now();
  StatusOr<InferenceRequest> call =
      CheckCall(*model, *request, deadline, std::move(cancelled), start);
  if (!call.ok()) return done(call.status());
  // A hit needs no decoding when the key comes from the wire bytes.
  CacheLookup cached = LookUpCache(*model, *request, nullptr, response);
  Clock::duration decoding{0};
  if (!cached.hit) {
    const Clock::time_point decode_start = Clock::now();
    if (Status decoded = DecodeCallInputs(*model, *request, start, &*call); !decoded.ok()) {
      return done(decoded);
    }
    decoding = Clock::now() - decode_start;
    if (cached.key.empty()) cached = LookUpCache(*model, *request, &call->inputs, response);
  }
  if (cached.hit) {
    FillResponseHeader(*model, *request, response);
    model->RecordCache(true, cached.spent);
    model->RecordRequest(InferenceResult(), Clock::now() - start);
    return done(OkStatus());
  }
  SequenceBatcher* sequences = model->sequences();
  const bool ensemble = model->ensemble() != nullptr;
  auto answer = [this, model, request, response, start, decoding, cached = std::move(cached),
                 done = std::move(done)](InferenceResult result) {
    Status status = result.status;
    Clock::duration encoding{0};
    if (status.ok()) {
      const Clock::time_point encode_start = Clock::now();
      status = EncodeAnswer(*model, *request, &result, response);
      encoding = Clock::now() - encode_start;
    }
    if (status.ok() && !cached.key.empty()) {
      const Clock::time_point keeping = Clock::now();
      cache_->Insert(cached.key, *response);
      model->RecordCache(false, cached.spent + (Clock::now() - keeping));
    }
    model->RecordRequest(result, Clock::now() - start, decoding, encoding);
    done(status);
  };
  if (ensemble) return RunEnsemble(*model, std::move(*call), std::move(answer));
  if (sequences == nullptr) return model->scheduler().Submit(std::move(*call), std::move(answer));
  StatusOr<SequenceRequest> in_sequence = SequenceOf(*request, std::move(*call));
  if (!in_sequence.ok()) {
    InferenceResult refused;
    refused.status = in_sequence.status();
    return answer(std::move(refused));
  }
  sequences->Submit(std::move(*in_sequence), std::move(answer));
}

}  // namespace chorus
