// InferenceCore's calls from inside the server: an ensemble's steps and
// (model_calls.h) a Python model's calls to other models.
#include <algorithm>

#include "chorus/server/models/inference_core.h"
#include "chorus/server/models/tensor_codec.h"
#include "server/models/src/request_attributes.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

class InProcessCalls final : public ModelCallHandler {
 public:
  explicit InProcessCalls(InferenceCore* core) : core_(core) {}
  void Call(ModelCall call, std::function<void(StatusOr<CallResponse>)> done) override {
    core_->CallInProcess(std::move(call), std::move(done));
  }
  void LoadModel(ModelLoadRequest load, std::function<void(Status)> done) override {
    core_->LoadFromModelCode(std::move(load), std::move(done));
  }
  void UnloadModel(std::string model, std::function<void(Status)> done) override {
    core_->UnloadFromModelCode(std::move(model), std::move(done));
  }
  StatusOr<bool> ModelReady(const std::string& model, const std::string& version) override {
    return core_->ModelReadyForModelCode(model, version);
  }

 private:
  InferenceCore* const core_;
};

// The positions (in `manifest` output order) of the outputs `names` asks
// for, all when it is empty; INVALID_ARGUMENT for one the model lacks.
StatusOr<std::vector<size_t>> OutputPositions(const Manifest& manifest,
                                              const std::vector<std::string>& names) {
  std::vector<size_t> positions;
  for (size_t i = 0; i < manifest.outputs.size(); ++i) {
    if (names.empty()) positions.push_back(i);
  }
  for (const std::string& name : names) {
    auto spec = std::find_if(manifest.outputs.begin(), manifest.outputs.end(),
                             [&](const TensorSpec& s) { return s.name == name; });
    if (spec == manifest.outputs.end()) {
      return InvalidArgumentError("output \"" + name + "\": the model has no such output");
    }
    positions.push_back(spec - manifest.outputs.begin());
  }
  return positions;
}

// The outputs at `positions`, by name.
NamedValues Pick(const Manifest& manifest, const std::vector<size_t>& positions,
                 std::vector<c10::IValue> outputs) {
  NamedValues named;
  for (size_t i : positions) {
    // An output the model left out of its answer (None) is not there.
    if (i < outputs.size() && !outputs[i].isNone()) {
      named.emplace_back(manifest.outputs[i].name, std::move(outputs[i]));
    }
  }
  return named;
}

// The request an in-process `call` makes of `inputs`: its context, and the
// fields a model that reads its requests sees.
InferenceRequest RequestOf(const LoadedModel& model, ModelCall call,
                           std::vector<c10::IValue> inputs) {
  InferenceRequest request;
  request.id = std::move(call.request_id);
  request.inputs = std::move(inputs);
  request.deadline = call.context.deadline;
  request.cancelled = std::move(call.context.cancelled);
  request.call_path = std::move(call.context.call_path);
  request.parameters = std::move(call.parameters);
  request.requested_outputs = call.outputs;
  if (request.requested_outputs.empty()) {
    for (const TensorSpec& spec : model.manifest().outputs) {
      request.requested_outputs.push_back(spec.name);
    }
  }
  std::visit([&request](const auto& id) { request.correlation_id = id; }, call.correlation_id);
  request.flags = call.flags;
  return request;
}

}  // namespace

std::shared_ptr<ModelCallHandler> InferenceCore::ModelCalls() {
  return std::make_shared<InProcessCalls>(this);
}

void InferenceCore::CallInProcess(ModelCall call,
                                  std::function<void(StatusOr<CallResponse>)> done) const {
  if (!accepting()) return done(UnavailableError("the server is not ready"));
  StatusOr<std::shared_ptr<LoadedModel>> found = repository_->Find(call.model, call.version);
  if (!found.ok()) return done(found.status());
  std::shared_ptr<LoadedModel> model = std::move(*found);
  const std::string about = "model \"" + model->name() + "\"";
  StatusOr<std::vector<c10::IValue>> inputs =
      ArrangeInputs(std::move(call.inputs), model->manifest());
  if (!inputs.ok()) return done(inputs.status().Annotate(about));
  StatusOr<std::vector<size_t>> wanted = OutputPositions(model->manifest(), call.outputs);
  if (!wanted.ok()) return done(wanted.status().Annotate(about));
  if (Status reshaped = ReshapeInputs(*model, &*inputs); !reshaped.ok()) {
    return done(reshaped.Annotate(about));
  }
  auto on_response = std::move(call.on_response);
  const bool caller_waits = call.caller_waits;
  InferenceRequest request = RequestOf(*model, std::move(call), std::move(*inputs));
  if (on_response && model->scheduling().decoupled) {
    request.on_response = [model, positions = *wanted,
                           each = std::move(on_response)](ModelResponse response) {
      CallResponse answer;
      answer.error = std::move(response.status);
      answer.parameters = std::move(response.parameters);
      answer.final = response.final;
      if (answer.error.ok()) {
        answer.error = ReshapeOutputs(*model, &response.outputs);
        answer.outputs = Pick(model->manifest(), positions, std::move(response.outputs));
      }
      return each(std::move(answer));  // an error response goes on the stream too
    };
  }
  CallModel(
      model, std::move(request),
      [model, positions = std::move(*wanted), done = std::move(done)](InferenceResult result) {
        if (!result.status.ok()) return done(result.status);
        if (Status reshaped = ReshapeOutputs(*model, &result.outputs); !reshaped.ok()) {
          return done(reshaped);
        }
        CallResponse answer;
        answer.outputs = Pick(model->manifest(), positions, std::move(result.outputs));
        answer.parameters = std::move(result.parameters);
        done(std::move(answer));
      },
      caller_waits);
}

void InferenceCore::LoadFromModelCode(ModelLoadRequest load, std::function<void(Status)> done) {
  ModelOverride override;
  override.config_json = std::move(load.config_json);
  for (auto& [path, contents] : load.files) {
    // Triton's keys name the file as its load calls do: "file:1/model.py".
    const bool prefixed = path.rfind("file:", 0) == 0;
    override.files[prefixed ? path.substr(5) : path] = std::move(contents);
  }
  if (!options_.repository_calls_refused.empty()) {
    return done(FailedPreconditionError("cannot load " + load.model + ": " +
                                        options_.repository_calls_refused));
  }
  if (background_->OnRunner()) {  // from a model's initialize(), loading on this very thread
    return done(repository_->Load(load.model, override));
  }
  LoadModel(std::move(load.model), std::move(done), std::move(override));
}

void InferenceCore::UnloadFromModelCode(std::string model, std::function<void(Status)> done) {
  UnloadModel(std::move(model), std::move(done));
}

StatusOr<bool> InferenceCore::ModelReadyForModelCode(const std::string& model,
                                                     const std::string& version) const {
  StatusOr<std::shared_ptr<LoadedModel>> found = repository_->Find(model, version);
  if (found.ok()) return true;  // also at start-up, before the server accepts calls
  if (found.status().code() == StatusCode::kNotFound && !repository_->layout().HasModel(model)) {
    return found.status();
  }
  return false;
}

void InferenceCore::RunEnsemble(const LoadedModel& model, InferenceRequest call,
                                ModelScheduler::Done done) const {
  ModelRepository* repository = repository_;
  model.ensemble()->Run(
      std::move(call),
      [repository](const std::string& name, const std::string& version) {
        return repository->Find(name, version);
      },
      [this](std::shared_ptr<LoadedModel> step, InferenceRequest request,
             ModelScheduler::Done step_done) {
        CallModel(std::move(step), std::move(request), std::move(step_done));
      },
      std::move(done));
}

void InferenceCore::CallModel(std::shared_ptr<LoadedModel> model, InferenceRequest call,
                              ModelScheduler::Done done, bool caller_waits) const {
  const Clock::time_point start = Clock::now();
  auto record = [model, start, done = std::move(done)](InferenceResult result) {
    model->RecordRequest(result, Clock::now() - start);
    done(std::move(result));
  };
  auto refuse = [&](Status status) {
    InferenceResult refused;
    refused.status = std::move(status);
    record(std::move(refused));
  };
  const std::vector<std::string>& path = call.call_path;
  if (std::find(path.begin(), path.end(), model->name()) != path.end()) {
    std::string cycle;
    for (const std::string& name : path) cycle += name + " -> ";
    return refuse(InvalidArgumentError("model call cycle: " + cycle + model->name()));
  }
  if (model->ensemble()) return RunEnsemble(*model, std::move(call), std::move(record));
  if (model->sequences() != nullptr || model->generation() != nullptr ||
      (model->scheduling().decoupled && !call.on_response)) {
    return refuse(InvalidArgumentError("model \"" + model->name() + "\" " +
                                       (model->sequences()
                                            ? "is stateful (its requests carry sequence parameters)"
                                            : "streams its responses: call it as a stream")));
  }
  // `model` (this frame's) keeps the scheduler alive while the call runs here.
  if (caller_waits) return model->scheduler().SubmitOrRun(std::move(call), std::move(record));
  model->scheduler().Submit(std::move(call), std::move(record));
}

}  // namespace chorus
