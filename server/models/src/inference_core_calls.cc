// InferenceCore's calls from inside the server: an ensemble's steps and
// (model_calls.h) a Python model's calls to other models.
#include <algorithm>

#include "chorus/server/models/inference_core.h"

namespace chorus {

using Clock = std::chrono::steady_clock;

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
                              ModelScheduler::Done done) const {
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
  model->scheduler().Submit(std::move(call), std::move(record));
}

}  // namespace chorus
