#include "chorus/server/python_backend/python_backend_model.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <set>

#include "chorus/common/logging.h"
#include "chorus/interpreter/python_calls.h"
#include "chorus/server/config/triton_config.h"
#include "server/python_backend/src/open_requests.h"
#include "server/python_backend/src/request_handle.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kBackendModule[] = "chorus.triton.backend";

// A key no other load in the process has: the model's module namespace.
std::string ModelKey(const PythonBackendOptions& options) {
  static std::atomic<uint64_t> serial{0};
  return options.model_name + "/" + options.version + "/" + std::to_string(++serial);
}

// chorus.<backend>.<function>(*args) in `session`'s interpreter.
StatusOr<Object> CallBackend(InterpreterSession& session, std::string_view function,
                             const std::vector<c10::IValue>& args, const CallOptions& options) {
  return CallModuleFunction(session, kBackendModule, function, args, options);
}

// Imports model.py (idempotent per interpreter and key).
Status LoadModule(InterpreterSession& session, const std::string& key,
                  const PythonBackendOptions& options) {
  return WithPythonErrorLogged(
      CallBackend(session, "load",
                  {key, options.model_name, options.version, options.model_dir, options.file_name},
                  CallWithin(options.load_timeout))
          .status(),
      "loading " + options.model_dir + "/" + options.version + "/" + options.file_name);
}

const char* KindName(inference::ModelInstanceGroup::Kind kind) {
  switch (kind) {
    case inference::ModelInstanceGroup::KIND_GPU:
      return "GPU";
    case inference::ModelInstanceGroup::KIND_MODEL:
      return "MODEL";
    default:
      return "CPU";
  }
}

// Triton's instances of the config's groups: count per group (per GPU of a
// KIND_GPU group), named <group>_<index>; no interpreter yet.
std::vector<PythonBackendModel::Instance> InstancesOf(const inference::ModelConfig& config) {
  std::vector<PythonBackendModel::Instance> instances;
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    const bool gpu = group.kind() == inference::ModelInstanceGroup::KIND_GPU;
    std::vector<int> devices(group.gpus().begin(), group.gpus().end());
    if (!gpu || devices.empty()) devices = {0};
    int index = 0;
    for (int device : devices) {
      for (int i = 0; i < std::max(1, group.count()); ++i) {
        instances.push_back(
            {group.name() + "_" + std::to_string(index++), KindName(group.kind()), device, 0});
      }
    }
  }
  return instances;
}

// initialize()'s args, in Triton's formats.
c10::Dict<std::string, std::string> InitializeArgs(const PythonBackendOptions& options,
                                                   const PythonBackendModel::Instance& instance) {
  c10::Dict<std::string, std::string> args;
  args.insert("model_config", TritonConfigJson(*options.config));
  args.insert("model_instance_kind", instance.kind);
  args.insert("model_instance_device_id", std::to_string(instance.device_id));
  args.insert("model_instance_name", instance.name);
  args.insert("model_repository", options.model_dir);
  args.insert("model_version", options.version);
  args.insert("model_name", options.model_name);
  return args;
}

}  // namespace

StatusOr<std::string> PythonBackendModel::AutoCompleteConfig(InterpreterManager* manager,
                                                             const PythonBackendOptions& options,
                                                             const std::string& config_json) {
  const std::string key = ModelKey(options);
  InterpreterSession session = manager->AcquireOne();
  CHORUS_RETURN_IF_ERROR(LoadModule(session, key, options));
  StatusOr<Object> completed = CallBackend(session, "auto_complete_config", {key, config_json},
                                           CallWithin(options.load_timeout));
  Status unloaded = CallBackend(session, "unload", {key}, {}).status();
  if (!completed.ok()) return WithPythonErrorLogged(completed.status(), "auto_complete_config");
  if (!unloaded.ok())
    WithPythonErrorLogged(unloaded, "forgetting the auto-complete's modules").IgnoreError();
  CHORUS_ASSIGN_OR_RETURN(c10::IValue text, completed->ToIValue());
  if (!text.isString()) return InternalError("auto_complete_config gave no JSON text");
  return text.toStringRef();
}

StatusOr<std::shared_ptr<PythonBackendModel>> PythonBackendModel::Load(
    InterpreterPlacement* placement, PythonBackendOptions options) {
  std::vector<Instance> instances = InstancesOf(*options.config);
  const int wanted = std::min<int>(instances.size(), placement->manager()->size());
  CHORUS_ASSIGN_OR_RETURN(
      InterpreterLease lease,
      placement->PinShared(wanted, "model " + options.model_name + " version " + options.version));
  const std::vector<int>& interpreters = lease.interpreters();
  for (size_t i = 0; i < instances.size(); ++i) {
    instances[i].interpreter = interpreters[i % interpreters.size()];
  }
  std::shared_ptr<PythonBackendModel> model(new PythonBackendModel(
      placement, std::move(options), std::move(lease), std::move(instances)));
  CHORUS_RETURN_IF_ERROR(model->MakeInstances());
  return model;
}

PythonBackendModel::PythonBackendModel(InterpreterPlacement* placement,
                                       PythonBackendOptions options, InterpreterLease lease,
                                       std::vector<Instance> instances)
    : placement_(placement),
      options_(std::move(options)),
      key_(ModelKey(options_)),
      signature_(std::make_shared<const Manifest>(options_.signature)),
      lease_(std::move(lease)),
      instances_(std::move(instances)),
      open_(std::make_shared<python_backend::OpenRequests>()) {
  execute_ = manager()->Replicate(
      [](InterpreterSession& session) { return session.Global(kBackendModule, "execute"); });
}

PythonBackendModel::~PythonBackendModel() {
  open_->Drain(Clock::now());
  std::thread check;
  {
    MutexLock lock(&ready_mu_);
    check = std::move(ready_thread_);
  }
  // The check's own thread may hold the last reference (an answer's callback).
  if (check.joinable())
    check.get_id() == std::this_thread::get_id() ? check.detach() : check.join();
  Finalize();
}

Status PythonBackendModel::MakeInstances() {
  std::set<int> imported;
  for (const Instance& instance : instances_) {
    InterpreterSession session = manager()->Acquire(instance.interpreter);
    if (imported.insert(instance.interpreter).second) {
      CHORUS_RETURN_IF_ERROR(LoadModule(session, key_, options_));
    }
    Status made = CallBackend(session, "create_instance",
                              {key_, instance.name, InitializeArgs(options_, instance)},
                              CallWithin(options_.load_timeout))
                      .status();
    if (!made.ok()) return WithPythonErrorLogged(made, "initializing " + instance.name);
    ++made_;
    if (made_ == 1) {
      StatusOr<Object> defined = CallBackend(session, "has_is_ready", {key_}, {});
      StatusOr<c10::IValue> value = defined.ok() ? defined->ToIValue() : defined.status();
      has_is_ready_ = value.ok() && value->isBool() && value->toBool();
    }
  }
  return OkStatus();
}

void PythonBackendModel::Finalize() {
  std::set<int> interpreters;
  for (int i = 0; i < static_cast<int>(instances_.size()); ++i) {
    const Instance& instance = instances_[i];
    interpreters.insert(instance.interpreter);
    if (i >= made_) continue;
    InterpreterSession session = manager()->Acquire(instance.interpreter);
    WithPythonErrorLogged(CallBackend(session, "finalize", {key_, instance.name}, {}).status(),
                          "finalizing " + instance.name)
        .IgnoreError();
  }
  for (int interpreter : interpreters) {
    InterpreterSession session = manager()->Acquire(interpreter);
    WithPythonErrorLogged(CallBackend(session, "unload", {key_}, {}).status(), "unloading " + key_)
        .IgnoreError();
  }
}

Status PythonBackendModel::Execute(int instance, std::vector<ExecutorRequest> batch) {
  const Instance& target = instances_.at(instance);
  const Clock::time_point start = Clock::now();
  Clock::time_point deadline = Clock::time_point::min();
  std::vector<std::shared_ptr<python_backend::OpenRequest>> opened;
  c10::impl::GenericList requests(c10::AnyType::get());
  for (ExecutorRequest& call : batch) {
    deadline = std::max(deadline, call.request.deadline);  // never cut a request short
    const int64_t rows = call.batch_size;
    opened.push_back(
        python_backend::OpenRequest::Open(std::move(call), rows, options_.decoupled, start, open_));
    requests.push_back(python_backend::ReceivedRequest(opened.back(), signature_));
  }
  Status ran;
  {
    c10::InferenceMode guard;
    InterpreterSession session = manager()->Acquire(target.interpreter);
    StatusOr<Object> execute = execute_.In(session);
    ran = execute.ok() ? execute
                             ->Call({key_, target.name, std::move(requests), options_.decoupled},
                                    {}, CallOptions{deadline, target.interpreter})
                             .status()
                       : execute.status();
  }
  if (ran.ok()) return ran;
  const Status failed = WithPythonErrorLogged(ran, "model '" + target.name + "'");
  for (const auto& request : opened) {
    request->Fail(Status(failed.code(), "Failed to process the request(s) for model '" +
                                            target.name + "', message: " + failed.message()));
  }
  return failed;
}

void PythonBackendModel::Drain(Clock::time_point deadline) { open_->Drain(deadline); }

bool PythonBackendModel::InstancesReady(std::chrono::milliseconds timeout) {
  for (const Instance& instance : instances_) {
    InterpreterSession session = manager()->Acquire(instance.interpreter);
    StatusOr<Object> ready =
        CallBackend(session, "is_ready", {key_, instance.name}, CallWithin(timeout));
    if (!ready.ok()) return false;
    StatusOr<c10::IValue> value = ready->ToIValue();
    if (!value.ok() || !value->isBool() || !value->toBool()) return false;
  }
  return true;
}

void PythonBackendModel::CheckReady(std::function<void(bool)> done) {
  if (!has_is_ready_) return done(true);
  std::thread finished;  // the previous check's thread, joined outside the lock
  {
    MutexLock lock(&ready_mu_);
    ready_waiters_.push_back(std::move(done));
    if (checking_) return;  // the check in flight answers this caller too
    checking_ = true;
    finished = std::move(ready_thread_);
    ready_thread_ = std::thread([this] {
      const bool ready = InstancesReady(std::chrono::seconds(5));
      std::vector<std::function<void(bool)>> waiters;
      {
        MutexLock lock(&ready_mu_);
        waiters.swap(ready_waiters_);
        checking_ = false;
      }
      for (auto& waiter : waiters) waiter(ready);
    });
  }
  if (finished.joinable()) finished.join();
}

}  // namespace chorus
