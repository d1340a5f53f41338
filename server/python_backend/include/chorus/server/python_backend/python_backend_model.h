// server/python_backend/: Triton's Python backend inside chorus'
// interpreters. A model folder's model.py defines TritonPythonModel; each
// instance config.pbtxt's instance_group asks for is one object of it in one
// interpreter (instances placed over the interpreters in turn: K instances
// cost K objects, not K processes). The model's ModelScheduler hands each
// batch unjoined to one instance (serving/request_executor.h); its execute()
// answers every request through a handle (a HostObject, request_handle.h),
// now or later from any thread; its calls to other models (BLS) are chorus'
// in-process model calls. The Python half, with the module models import as
// triton_python_backend_utils, is python/chorus/triton.
#ifndef CHORUS_SERVER_PYTHON_BACKEND_PYTHON_BACKEND_MODEL_H_
#define CHORUS_SERVER_PYTHON_BACKEND_PYTHON_BACKEND_MODEL_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/inference/model_config.pb.h"
#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/interpreter/placement.h"
#include "chorus/package/manifest.h"
#include "chorus/serving/request_executor.h"

namespace chorus {

namespace python_backend {
class OpenRequests;
}  // namespace python_backend

struct PythonBackendOptions {
  std::string model_name;
  std::string version;
  std::string model_dir;               // absolute: <repository>/<model>
  std::string file_name = "model.py";  // in the version folder
  // The model's config, normalized (and auto-completed): its instance groups,
  // and what initialize() gets as args["model_config"].
  std::shared_ptr<const inference::ModelConfig> config;
  // What clients send and get, by the config (batch dimension included).
  Manifest signature;
  bool decoupled = false;
  // How long importing model.py and each initialize() may take (0: no limit).
  std::chrono::milliseconds load_timeout{0};
};

class PythonBackendModel final : public RequestExecutor {
 public:
  // The config auto_complete_config (a static method of TritonPythonModel)
  // makes of `config_json` (Triton's JSON form), or `config_json` itself when
  // the class has none. Imports model.py in one interpreter first. Errors:
  // the module's or the method's, with Triton's texts (tracebacks logged).
  static StatusOr<std::string> AutoCompleteConfig(InterpreterManager* manager,
                                                  const PythonBackendOptions& options,
                                                  const std::string& config_json);

  // Places the model's instances, imports model.py in each interpreter that
  // holds one, and makes each (TritonPythonModel(), then initialize(args)).
  // Errors: the first instance's that failed (those made are finalized), or
  // FAILED_PRECONDITION when every interpreter is held by training jobs.
  // `placement` outlives the model. Blocks while the model loads.
  static StatusOr<std::shared_ptr<PythonBackendModel>> Load(InterpreterPlacement* placement,
                                                            PythonBackendOptions options);

  // finalize() of each instance, then the model's modules are forgotten.
  ~PythonBackendModel() override;
  PythonBackendModel(const PythonBackendModel&) = delete;
  PythonBackendModel& operator=(const PythonBackendModel&) = delete;

  int instances() const override { return static_cast<int>(instances_.size()); }
  // execute() of instance `instance` on `batch`, on that instance's
  // interpreter, until the batch's latest deadline. An exception it raises
  // fails every request not answered yet, with Triton's message.
  Status Execute(int instance, std::vector<ExecutorRequest> batch) override;
  void Drain(std::chrono::steady_clock::time_point deadline) override;

  // Calls `done` with whether every instance is ready: at once (true) when
  // the model's class has no is_ready(); else once each instance's is_ready()
  // answered True (or one did not within 5 s: not ready, Triton's rule), on
  // a thread of the model's own. Callers while a check runs share it. Any thread.
  void CheckReady(std::function<void(bool)> done) CHORUS_EXCLUDES(ready_mu_);

  // Each instance's name (Triton's: <group>_<index>) and interpreter.
  struct Instance {
    std::string name;
    std::string kind;  // "CPU", "GPU", "MODEL"
    int device_id = 0;
    int interpreter = 0;
  };
  const std::vector<Instance>& instance_list() const { return instances_; }

 private:
  PythonBackendModel(InterpreterPlacement* placement, PythonBackendOptions options,
                     InterpreterLease lease, std::vector<Instance> instances);
  // Imports model.py where instances are and makes each; the first error.
  Status MakeInstances();
  // finalize() on the instances made, then the module namespaces dropped.
  void Finalize();
  // Whether every instance's is_ready() returns True within `timeout`.
  bool InstancesReady(std::chrono::milliseconds timeout);
  InterpreterManager* manager() const { return placement_->manager(); }

  InterpreterPlacement* const placement_;
  const PythonBackendOptions options_;
  const std::string key_;  // names the model's module namespace in each interpreter
  const std::shared_ptr<const Manifest> signature_;
  InterpreterLease lease_;
  const std::vector<Instance> instances_;
  int made_ = 0;               // instances whose initialize() returned (Finalize's count)
  bool has_is_ready_ = false;  // the class defines is_ready()
  std::shared_ptr<python_backend::OpenRequests> open_;
  ReplicatedObject execute_;  // chorus.triton.backend.execute, per interpreter

  Mutex ready_mu_;
  std::vector<std::function<void(bool)>> ready_waiters_ CHORUS_GUARDED_BY(ready_mu_);
  bool checking_ CHORUS_GUARDED_BY(ready_mu_) = false;
  std::thread ready_thread_ CHORUS_GUARDED_BY(ready_mu_);  // the last check's
};

}  // namespace chorus

#endif  // CHORUS_SERVER_PYTHON_BACKEND_PYTHON_BACKEND_MODEL_H_
