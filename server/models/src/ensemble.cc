#include "chorus/server/models/ensemble.h"

#include <algorithm>
#include <map>
#include <set>

#include "chorus/common/thread_annotations.h"
#include "chorus/server/models/loaded_model.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

const TensorSpec* FindSpec(const std::vector<TensorSpec>& specs, const std::string& name) {
  auto it = std::find_if(specs.begin(), specs.end(),
                         [&](const TensorSpec& spec) { return spec.name == name; });
  return it == specs.end() ? nullptr : &*it;
}

std::string Names(const std::vector<TensorSpec>& specs) {
  std::string names;
  for (const TensorSpec& spec : specs) names += (names.empty() ? "" : ", ") + spec.name;
  return names;
}

Status PlanError(const std::string& at, const std::string& why) {
  return InvalidArgumentError("config.json: " + at + ": " + why);
}

// A step model must answer each request once, alone.
Status CheckStepModel(LoadedModel& model, const std::string& at) {
  if (model.scheduling().decoupled || model.generation() != nullptr) {
    return PlanError(at, "model \"" + model.name() +
                             "\" streams (decoupled or generative); an ensemble step answers once");
  }
  if (model.sequences() != nullptr) {
    return PlanError(at, "model \"" + model.name() + "\" is stateful (sequence_batching)");
  }
  return OkStatus();
}

// What an ensemble tensor is: its maker ("" for an ensemble input) and dtype.
struct TensorOrigin {
  std::string maker;
  std::string dtype;
};
using Origins = std::map<std::string, TensorOrigin>;

Status AddStepOutputs(const EnsembleStep& step, const LoadedModel& model, const std::string& at,
                      Origins* origins) {
  const std::vector<TensorSpec>& outputs = model.manifest().outputs;
  for (const auto& [output, tensor] : step.output_map) {
    const TensorSpec* spec = FindSpec(outputs, output);
    if (spec == nullptr) {
      return PlanError(at + ".output_map", "model \"" + model.name() + "\" has no output \"" +
                                               output + "\" (its outputs: " + Names(outputs) + ")");
    }
    if (auto made = origins->find(tensor); made != origins->end()) {
      return PlanError(at + ".output_map." + output,
                       "tensor \"" + tensor + "\" is already " +
                           (made->second.maker.empty() ? "an input of the ensemble"
                                                       : "made by " + made->second.maker));
    }
    (*origins)[tensor] = {at, spec->dtype};
  }
  return OkStatus();
}

Status CheckStepInputs(const EnsembleStep& step, const LoadedModel& model, const std::string& at,
                       const Origins& origins) {
  const std::vector<TensorSpec>& inputs = model.manifest().inputs;
  for (const TensorSpec& spec : inputs) {
    if (step.input_map.count(spec.name) == 0) {
      return PlanError(at + ".input_map", "input \"" + spec.name + "\" of model \"" + model.name() +
                                              "\" is not mapped");
    }
  }
  for (const auto& [input, tensor] : step.input_map) {
    const TensorSpec* spec = FindSpec(inputs, input);
    if (spec == nullptr) {
      return PlanError(at + ".input_map", "model \"" + model.name() + "\" has no input \"" + input +
                                              "\" (its inputs: " + Names(inputs) + ")");
    }
    auto origin = origins.find(tensor);
    if (origin == origins.end()) {
      return PlanError(
          at + ".input_map." + input,
          "tensor \"" + tensor + "\" is neither an input of the ensemble nor an output of a step");
    }
    if (origin->second.dtype != spec->dtype) {
      return PlanError(at + ".input_map." + input,
                       "tensor \"" + tensor + "\" is " + origin->second.dtype + ", input \"" +
                           input + "\" of model \"" + model.name() + "\" takes " + spec->dtype);
    }
  }
  return OkStatus();
}

Status CheckOutputs(const Manifest& signature, const Origins& origins) {
  for (const TensorSpec& output : signature.outputs) {
    auto origin = origins.find(output.name);
    if (origin == origins.end() || origin->second.maker.empty()) {
      return PlanError("outputs", "no step makes output \"" + output.name + "\"");
    }
    if (origin->second.dtype != output.dtype) {
      return PlanError("outputs", "output \"" + output.name + "\" is " + output.dtype + ", but " +
                                      origin->second.maker + " makes " + origin->second.dtype);
    }
  }
  return OkStatus();
}

// Whether every tensor `step` takes is among `tensors` (names: a set or a map).
template <typename Tensors>
bool HasInputs(const EnsembleStep& step, const Tensors& tensors) {
  for (const auto& [input, tensor] : step.input_map) {
    if (tensors.count(tensor) == 0) return false;
  }
  return true;
}

// Every step can run once the ones before it in some order have.
Status CheckAcyclic(const Manifest& signature, const std::vector<EnsembleStep>& steps) {
  std::set<std::string> ready;
  for (const TensorSpec& input : signature.inputs) ready.insert(input.name);
  std::vector<bool> ran(steps.size(), false);
  for (size_t progress = 1; progress > 0;) {
    progress = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (ran[i] || !HasInputs(steps[i], ready)) continue;
      ran[i] = true;
      ++progress;
      for (const auto& out : steps[i].output_map) ready.insert(out.second);
    }
  }
  auto stuck = std::find(ran.begin(), ran.end(), false);
  if (stuck == ran.end()) return OkStatus();
  return PlanError("ensemble_scheduling.step[" + std::to_string(stuck - ran.begin()) + "]",
                   "waits on its own outputs (the steps form a cycle)");
}

std::string CyclePath(const std::vector<std::string>& path, const std::string& model) {
  std::string text;
  for (const std::string& name : path) text += name + " -> ";
  return text + model;
}

}  // namespace

StatusOr<std::shared_ptr<const Ensemble>> Ensemble::Plan(const std::string& name,
                                                         const Manifest& signature,
                                                         std::vector<EnsembleStep> steps,
                                                         const FindModel& find) {
  Origins origins;
  for (const TensorSpec& input : signature.inputs) origins[input.name] = {"", input.dtype};
  std::vector<std::shared_ptr<LoadedModel>> models;
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string at = "ensemble_scheduling.step[" + std::to_string(i) + "]";
    if (steps[i].model_name == name) return PlanError(at, "an ensemble cannot be its own step");
    StatusOr<std::shared_ptr<LoadedModel>> model =
        find(steps[i].model_name, steps[i].model_version);
    if (!model.ok()) {
      return Status(model.status().code(), "config.json: " + at + ": model \"" +
                                               steps[i].model_name +
                                               "\" does not serve: " + model.status().message());
    }
    CHORUS_RETURN_IF_ERROR(CheckStepModel(**model, at));
    CHORUS_RETURN_IF_ERROR(AddStepOutputs(steps[i], **model, at, &origins));
    models.push_back(std::move(*model));
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string at = "ensemble_scheduling.step[" + std::to_string(i) + "]";
    CHORUS_RETURN_IF_ERROR(CheckStepInputs(steps[i], *models[i], at, origins));
  }
  CHORUS_RETURN_IF_ERROR(CheckOutputs(signature, origins));
  CHORUS_RETURN_IF_ERROR(CheckAcyclic(signature, steps));
  return std::shared_ptr<const Ensemble>(new Ensemble(name, signature, std::move(steps)));
}

struct Ensemble::Execution {
  std::shared_ptr<const Ensemble> ensemble;  // outlives an unload while it runs
  InferenceRequest request;                  // its deadline, cancellation and call path
  FindModel find;
  Dispatch dispatch;
  std::function<void(InferenceResult)> done;
  Clock::time_point start = Clock::now();
  Mutex mu;
  std::map<std::string, c10::IValue> tensors CHORUS_GUARDED_BY(mu);
  std::vector<bool> started CHORUS_GUARDED_BY(mu);
  size_t finished CHORUS_GUARDED_BY(mu) = 0;
  bool ended CHORUS_GUARDED_BY(mu) = false;

  // Answers the ensemble's request, once.
  void Finish(InferenceResult result) CHORUS_EXCLUDES(mu) {
    {
      MutexLock lock(&mu);
      if (ended) return;
      ended = true;
    }
    result.compute_time = Clock::now() - start;
    done(std::move(result));
  }
  void Fail(Status status) {
    InferenceResult result;
    result.status = std::move(status);
    Finish(std::move(result));
  }
};

void Ensemble::Run(InferenceRequest request, FindModel find, Dispatch dispatch,
                   std::function<void(InferenceResult)> done) const {
  auto run = std::make_shared<Execution>();
  run->ensemble = shared_from_this();
  run->find = std::move(find);
  run->dispatch = std::move(dispatch);
  run->done = std::move(done);
  if (std::count(request.call_path.begin(), request.call_path.end(), name_) > 0) {
    return run->Fail(
        InvalidArgumentError("model call cycle: " + CyclePath(request.call_path, name_)));
  }
  {
    MutexLock lock(&run->mu);
    for (size_t i = 0; i < signature_.inputs.size(); ++i) {
      run->tensors[signature_.inputs[i].name] = std::move(request.inputs[i]);
    }
    run->started.assign(steps_.size(), false);
  }
  request.inputs.clear();
  request.call_path.push_back(name_);
  run->request = std::move(request);
  StartReady(run);
}

void Ensemble::StartReady(const std::shared_ptr<Execution>& run) const {
  std::vector<size_t> ready;
  {
    MutexLock lock(&run->mu);
    if (run->ended) return;
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (run->started[i] || !HasInputs(steps_[i], run->tensors)) continue;
      run->started[i] = true;
      ready.push_back(i);
    }
  }
  for (size_t step : ready) StartStep(run, step);
}

void Ensemble::StartStep(const std::shared_ptr<Execution>& run, size_t step) const {
  const EnsembleStep& plan = steps_[step];
  const std::string at = "ensemble \"" + name_ + "\" step " + std::to_string(step) + " (model \"" +
                         plan.model_name + "\")";
  StatusOr<std::shared_ptr<LoadedModel>> model = run->find(plan.model_name, plan.model_version);
  if (!model.ok()) return run->Fail(model.status().Annotate(at));
  InferenceRequest call;
  call.id = run->request.id;
  call.deadline = run->request.deadline;
  call.cancelled = run->request.cancelled;
  call.call_path = run->request.call_path;
  {
    MutexLock lock(&run->mu);
    for (const TensorSpec& spec : (*model)->manifest().inputs) {
      auto mapped = plan.input_map.find(spec.name);
      if (mapped == plan.input_map.end()) {
        return run->Fail(FailedPreconditionError(at + ": its input \"" + spec.name +
                                                 "\" is not mapped (the model was reloaded with "
                                                 "another signature)"));
      }
      call.inputs.push_back(run->tensors.at(mapped->second));
    }
  }
  std::shared_ptr<LoadedModel> target = *model;
  run->dispatch(std::move(*model), std::move(call),
                [this, run, step, target, at](InferenceResult result) {
                  if (!result.status.ok()) return run->Fail(result.status.Annotate(at));
                  StepDone(run, step, *target, std::move(result));
                });
}

void Ensemble::StepDone(const std::shared_ptr<Execution>& run, size_t step,
                        const LoadedModel& model, InferenceResult result) const {
  const std::vector<TensorSpec>& outputs = model.manifest().outputs;
  bool all_done = false;
  InferenceResult answer;
  {
    MutexLock lock(&run->mu);
    if (run->ended) return;
    for (size_t i = 0; i < outputs.size() && i < result.outputs.size(); ++i) {
      auto mapped = steps_[step].output_map.find(outputs[i].name);
      if (mapped != steps_[step].output_map.end()) {
        run->tensors[mapped->second] = std::move(result.outputs[i]);
      }
    }
    all_done = ++run->finished == steps_.size();
    if (all_done) {
      for (const TensorSpec& output : signature_.outputs) {
        answer.outputs.push_back(run->tensors.at(output.name));
      }
      answer.batch_size = result.batch_size;
    }
  }
  if (all_done) return run->Finish(std::move(answer));
  StartReady(run);
}

}  // namespace chorus
