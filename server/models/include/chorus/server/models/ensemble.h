// An ensemble (Triton's "platform": "ensemble"): one request runs through
// several served models, each step when the tensors it takes are ready, the
// tensors passed between steps in process (the same tensors, no copies). The
// ensemble has no file and no scheduler: each step's request goes through its
// model's own scheduler (batching, deadlines, statistics).
#ifndef CHORUS_SERVER_MODELS_ENSEMBLE_H_
#define CHORUS_SERVER_MODELS_ENSEMBLE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/package/manifest.h"
#include "chorus/server/config/model_config.h"
#include "chorus/serving/scheduler.h"

namespace chorus {

class LoadedModel;

class Ensemble : public std::enable_shared_from_this<Ensemble> {
 public:
  // The loaded model `name` at `version` ("" = the one serving), or why not.
  using FindModel = std::function<StatusOr<std::shared_ptr<LoadedModel>>(
      const std::string& name, const std::string& version)>;
  // Hands a step's request to its model; `done` exactly once.
  using Dispatch = std::function<void(std::shared_ptr<LoadedModel> model, InferenceRequest request,
                                      std::function<void(InferenceResult)> done)>;

  // The plan of ensemble `name` of signature `signature`, checked against
  // its steps' models as `find` gives them now: each serves and answers once
  // per request (not decoupled, generative or stateful); each mapped tensor
  // exists on both sides, with one dtype; each ensemble tensor is an input of
  // the ensemble or made by exactly one step; every output is made; no step
  // waits on itself. Errors INVALID_ARGUMENT naming the step and the tensor
  // ("ensemble_scheduling.step[1].input_map: ..."), or `find`'s.
  static StatusOr<std::shared_ptr<const Ensemble>> Plan(const std::string& name,
                                                        const Manifest& signature,
                                                        std::vector<EnsembleStep> steps,
                                                        const FindModel& find);

  const std::string& name() const { return name_; }
  const std::vector<EnsembleStep>& steps() const { return steps_; }

  // Runs `request` (inputs in the signature's order): each step through
  // `dispatch`, on its model as `find` gives it at that moment (a step model
  // reloaded meanwhile serves with its new version; an unloaded one fails the
  // request, naming it). `done` is called once: the outputs in signature
  // order, or the first failing step's error, prefixed with the step. Any thread.
  void Run(InferenceRequest request, FindModel find, Dispatch dispatch,
           std::function<void(InferenceResult)> done) const;

 private:
  struct Execution;
  Ensemble(std::string name, Manifest signature, std::vector<EnsembleStep> steps)
      : name_(std::move(name)), signature_(std::move(signature)), steps_(std::move(steps)) {}
  // Starts every step of `run` whose tensors are all there and which has not started.
  void StartReady(const std::shared_ptr<Execution>& run) const;
  void StartStep(const std::shared_ptr<Execution>& run, size_t step) const;
  void StepDone(const std::shared_ptr<Execution>& run, size_t step, const LoadedModel& model,
                InferenceResult result) const;

  const std::string name_;
  const Manifest signature_;
  const std::vector<EnsembleStep> steps_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_ENSEMBLE_H_
