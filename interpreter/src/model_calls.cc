#include <algorithm>
#include <deque>
#include <string>

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
  std::deque<NamedValues> responses CHORUS_GUARDED_BY(mu);
  bool finished CHORUS_GUARDED_BY(mu) = false;
  Status status CHORUS_GUARDED_BY(mu);
  // The inner call's own flag: set by End, or when the caller is cancelled.
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<bool>> caller_cancelled;
  std::string model;
  // Past it, Next stops waiting (a model blocked in C may answer later).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();

  void Push(NamedValues values) CHORUS_EXCLUDES(mu) {
    MutexLock lock(&mu);
    responses.push_back(std::move(values));
    changed.SignalAll();
  }
  void Finish(Status result) CHORUS_EXCLUDES(mu) {
    MutexLock lock(&mu);
    finished = true;
    status = std::move(result);
    changed.SignalAll();
  }
};

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
    call.on_response = [state](NamedValues values) {
      state->Push(std::move(values));
      return !state->cancelled->load();
    };
  }
  handler->Call(std::move(call), [state](StatusOr<NamedValues> outputs) {
    if (outputs.ok() && !outputs->empty()) state->Push(std::move(*outputs));
    state->Finish(outputs.status());
  });
  return handle;
}

std::shared_ptr<ModelCallTable::Call> ModelCallTable::Find(uint64_t handle) {
  MutexLock lock(&mu_);
  auto it = calls_.find(handle);
  return it == calls_.end() ? nullptr : it->second;
}

StatusOr<std::optional<NamedValues>> ModelCallTable::Next(uint64_t handle) {
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
    NamedValues values = std::move(call->responses.front());
    call->responses.pop_front();
    return std::optional<NamedValues>(std::move(values));
  }
  if (!call->status.ok()) return call->status;
  return std::optional<NamedValues>();
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
}

}  // namespace chorus
