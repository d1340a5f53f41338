#include "server/python_backend/src/open_requests.h"

#include <vector>

namespace chorus::python_backend {

std::shared_ptr<OpenRequest> OpenRequest::Open(ExecutorRequest call, int64_t batch_size,
                                               bool decoupled, Clock::time_point execution_start,
                                               std::shared_ptr<OpenRequests> registry) {
  std::shared_ptr<OpenRequest> request(new OpenRequest(std::move(call), batch_size, decoupled,
                                                       execution_start, std::move(registry)));
  request->registry_->Add(request);
  return request;
}

InferenceResult OpenRequest::ResultOf(Status status) const {
  InferenceResult result;
  result.status = std::move(status);
  result.batch_size = batch_size_;
  result.queue_time = call_.queue_time;
  result.compute_time = Clock::now() - execution_start_;
  return result;
}

Status OpenRequest::Send(ModelResponse response) {
  std::optional<InferenceResult> finish;
  std::function<bool(ModelResponse)> respond;  // called outside the lock
  {
    MutexLock lock(&mu_);
    if (finished_) {
      return FailedPreconditionError("the request was already answered with a final response");
    }
    respond = respond_;
    if (!decoupled_) {
      if (!response.final) {
        kept_ = std::move(response);
        return OkStatus();
      }
      // The final flag alone (send(None, FINAL)) answers with the kept response.
      const bool flag_only =
          response.outputs.empty() && response.status.ok() && response.parameters.empty();
      ModelResponse answer = flag_only && kept_ ? std::move(*kept_) : std::move(response);
      finish = ResultOf(answer.status);
      finish->outputs = std::move(answer.outputs);
      finish->parameters = std::move(answer.parameters);
      finished_ = true;
    } else if (response.final) {
      finished_ = true;
      finish = ResultOf(OkStatus());
    }
  }
  // A decoupled model's response goes out now, outside the lock (the
  // transport writes it); the final flag alone only ends the stream.
  const bool flag_only = response.outputs.empty() && response.status.ok() &&
                         response.parameters.empty() && response.final;
  if (decoupled_ && !flag_only && respond) {
    const bool more = respond(std::move(response));
    if (!more && !finish) {
      // The client is gone: the request ends here; later sends are refused.
      {
        MutexLock lock(&mu_);
        if (finished_) return OkStatus();
        finished_ = true;
      }
      finish = ResultOf(Status(StatusCode::kCancelled, "the client stopped the stream"));
    }
  }
  if (finish) Finish(std::move(*finish));
  return OkStatus();
}

void OpenRequest::Fail(const Status& status) {
  {
    MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
  }
  Finish(ResultOf(status));
}

bool OpenRequest::finished() const {
  MutexLock lock(&mu_);
  return finished_;
}

void OpenRequest::Finish(InferenceResult result) {
  {
    // What answers the client holds the model it serves: dropped now, so a
    // handle the model keeps holds no cycle back to the model.
    MutexLock lock(&mu_);
    respond_ = nullptr;
  }
  auto done = std::move(call_.done);
  done(std::move(result));
  done = nullptr;
  registry_->Remove(this);
}

void OpenRequests::Add(const std::shared_ptr<OpenRequest>& request) {
  MutexLock lock(&mu_);
  open_[request.get()] = request;
}

void OpenRequests::Remove(const OpenRequest* request) {
  std::shared_ptr<OpenRequest> removed;  // released outside the lock
  {
    MutexLock lock(&mu_);
    auto it = open_.find(request);
    if (it == open_.end()) return;
    removed = std::move(it->second);
    open_.erase(it);
  }
  changed_.SignalAll();
}

size_t OpenRequests::size() const {
  MutexLock lock(&mu_);
  return open_.size();
}

void OpenRequests::Drain(Clock::time_point deadline) {
  std::vector<std::shared_ptr<OpenRequest>> left;
  {
    MutexLock lock(&mu_);
    while (!open_.empty() && Clock::now() < deadline) changed_.WaitUntil(&mu_, deadline);
    for (const auto& [key, request] : open_) left.push_back(request);
  }
  for (const auto& request : left) {
    request->Fail(UnavailableError("the model was unloaded before it answered this request"));
  }
}

}  // namespace chorus::python_backend
