#include <algorithm>
#include <deque>
#include <future>
#include <string>

#include "chorus/common/logging.h"
#include "chorus/interpreter/model_calls.h"
#include "interpreter/src/model_call_table.h"

namespace chorus {
namespace {

thread_local const ModelCallContext* t_context = nullptr;

// How often a waiting Next looks at the caller's cancellation.
constexpr std::chrono::milliseconds kCancelPoll{20};

}  // namespace

ScopedModelCallContext::ScopedModelCallContext(const ModelCallContext* context)
    : previous_(t_context) {
  t_context = context;
}

ScopedModelCallContext::~ScopedModelCallContext() { t_context = previous_; }

const ModelCallContext* CurrentModelCallContext() { return t_context; }

struct ModelCallTable::Call {
  Mutex mu;
  CondVar changed;
  std::deque<CallResponse> responses CHORUS_GUARDED_BY(mu);
  bool finished CHORUS_GUARDED_BY(mu) = false;
  Status status CHORUS_GUARDED_BY(mu);
  // The inner call's own flag: set by End, or when the caller is cancelled.
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<bool>> caller_cancelled;
  std::string model;
  // Past it, Next stops waiting (a model blocked in C may answer later).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();

  void Push(CallResponse response) CHORUS_EXCLUDES(mu) {
    MutexLock lock(&mu);
    responses.push_back(std::move(response));
    changed.SignalAll();
  }
  void Finish(Status result) CHORUS_EXCLUDES(mu) {
    MutexLock lock(&mu);
    if (finished) return;  // ended by End() first
    finished = true;
    status = std::move(result);
    changed.SignalAll();
  }
};

void ModelCallHandler::LoadModel(ModelLoadRequest load, std::function<void(Status)> done) {
  done(UnimplementedError("model code cannot load models here"));
}

void ModelCallHandler::UnloadModel(std::string model, std::function<void(Status)> done) {
  done(UnimplementedError("model code cannot unload models here"));
}

StatusOr<bool> ModelCallHandler::ModelReady(const std::string& model, const std::string& version) {
  return UnimplementedError("model code cannot ask for models' readiness here");
}

void ModelCallTable::SetHandler(std::shared_ptr<ModelCallHandler> handler) {
  MutexLock lock(&mu_);
  handler_ = std::move(handler);
}

StatusOr<uint64_t> ModelCallTable::Start(ModelCall call, std::chrono::nanoseconds timeout,
                                         bool stream) {
  auto state = std::make_shared<Call>();
  std::shared_ptr<ModelCallHandler> handler;
  uint64_t handle = 0;
  {
    MutexLock lock(&mu_);
    if (handler_ == nullptr) {
      return UnavailableError("no served models to call: the server is not serving");
    }
    handler = handler_;
    handle = next_handle_++;
    calls_[handle] = state;
  }
  if (const ModelCallContext* context = CurrentModelCallContext()) call.context = *context;
  if (timeout.count() > 0) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    call.context.deadline = std::min(call.context.deadline, until);
  }
  state->caller_cancelled = std::move(call.context.cancelled);
  state->model = call.model;
  state->deadline = call.context.deadline;
  call.context.cancelled = state->cancelled;
  if (stream) {
    call.on_response = [state](CallResponse response) {
      state->Push(std::move(response));
      return !state->cancelled->load();
    };
  }
  handler->Call(std::move(call), [state](StatusOr<CallResponse> answer) {
    if (answer.ok() && (!answer->outputs.empty() || !answer->parameters.empty())) {
      answer->final = true;  // the one answer of a model that answers once
      state->Push(std::move(*answer));
    }
    state->Finish(answer.status());
  });
  return handle;
}

std::shared_ptr<ModelCallTable::Call> ModelCallTable::Find(uint64_t handle) {
  MutexLock lock(&mu_);
  auto it = calls_.find(handle);
  return it == calls_.end() ? nullptr : it->second;
}

StatusOr<std::optional<CallResponse>> ModelCallTable::Next(uint64_t handle) {
  std::shared_ptr<Call> call = Find(handle);
  if (call == nullptr) return InvalidArgumentError("no open model call " + std::to_string(handle));
  MutexLock lock(&call->mu);
  while (call->responses.empty() && !call->finished) {
    if (call->caller_cancelled != nullptr && call->caller_cancelled->load()) {
      call->cancelled->store(true);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= call->deadline) {
      call->cancelled->store(true);
      return DeadlineExceededError("the call to model \"" + call->model +
                                   "\" ran past its deadline");
    }
    call->changed.WaitUntil(&call->mu, std::min(call->deadline, now + kCancelPoll));
  }
  if (!call->responses.empty()) {
    CallResponse response = std::move(call->responses.front());
    call->responses.pop_front();
    return std::optional<CallResponse>(std::move(response));
  }
  if (!call->status.ok()) return call->status;
  return std::optional<CallResponse>();
}

void ModelCallTable::End(uint64_t handle) {
  std::shared_ptr<Call> call;
  {
    MutexLock lock(&mu_);
    auto it = calls_.find(handle);
    if (it == calls_.end()) return;
    call = std::move(it->second);
    calls_.erase(it);
  }
  call->cancelled->store(true);
  call->Finish(Status(StatusCode::kCancelled, "the call was ended"));
}

StatusOr<std::shared_ptr<ModelCallHandler>> ModelCallTable::Handler() {
  MutexLock lock(&mu_);
  if (handler_ == nullptr) return UnavailableError("the server is not serving");
  return handler_;
}

Status ModelCallTable::LoadModel(ModelLoadRequest load) {
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<ModelCallHandler> handler, Handler());
  auto result = std::make_shared<std::promise<Status>>();
  std::future<Status> loaded = result->get_future();
  handler->LoadModel(std::move(load), [result](Status status) { result->set_value(status); });
  return loaded.get();
}

Status ModelCallTable::UnloadModel(const std::string& model) {
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<ModelCallHandler> handler, Handler());
  handler->UnloadModel(model, [model](Status status) {
    if (!status.ok()) Log().warn("model code's unload of {}: {}", model, status.ToString());
  });
  return OkStatus();
}

StatusOr<bool> ModelCallTable::ModelReady(const std::string& model, const std::string& version) {
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<ModelCallHandler> handler, Handler());
  return handler->ModelReady(model, version);
}

}  // namespace chorus
