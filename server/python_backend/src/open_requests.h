// The requests a Python-backend model holds and has not finished answering:
// each one's answer state (what Triton's response sender is to the model), and
// the model's registry of them, so that unloading the model waits for their
// final responses and fails those that never come. Thread-safe.
#ifndef CHORUS_SERVER_PYTHON_BACKEND_SRC_OPEN_REQUESTS_H_
#define CHORUS_SERVER_PYTHON_BACKEND_SRC_OPEN_REQUESTS_H_

#include <chrono>
#include <map>
#include <memory>
#include <optional>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/serving/request_executor.h"

namespace chorus::python_backend {

class OpenRequests;

// One request's answer: the responses the model sends and the final one.
class OpenRequest {
 public:
  using Clock = std::chrono::steady_clock;

  // `call` is answered through its `done` (and on_response) exactly once;
  // `execution_start` is when the batch it came in began running. Listed in
  // `registry` until it is finished.
  static std::shared_ptr<OpenRequest> Open(ExecutorRequest call, int64_t batch_size, bool decoupled,
                                           Clock::time_point execution_start,
                                           std::shared_ptr<OpenRequests> registry);

  const InferenceRequest& request() const { return call_.request; }
  bool decoupled() const { return decoupled_; }

  // A response from the model: its outputs (model output order, None where
  // left out) or its error, flagged final or not. FAILED_PRECONDITION once
  // the request was finished. A model that answers once gets its one
  // response on the final send (a response sent before it is kept until then).
  Status Send(ModelResponse response) CHORUS_EXCLUDES(mu_);
  // Finishes the request with `status` unless it was finished already.
  void Fail(const Status& status) CHORUS_EXCLUDES(mu_);
  bool finished() const CHORUS_EXCLUDES(mu_);

 private:
  // Answers through done() (outside the lock: it may run the client's code).
  void Finish(InferenceResult result);
  InferenceResult ResultOf(Status status) const;

  OpenRequest(ExecutorRequest call, int64_t batch_size, bool decoupled,
              Clock::time_point execution_start, std::shared_ptr<OpenRequests> registry)
      : respond_(std::move(call.request.on_response)),
        call_(std::move(call)),
        batch_size_(batch_size),
        decoupled_(decoupled),
        execution_start_(execution_start),
        registry_(std::move(registry)) {}

  mutable Mutex mu_;
  // The request's on_response (a stream's), until it is finished.
  std::function<bool(ModelResponse)> respond_ CHORUS_GUARDED_BY(mu_);
  ExecutorRequest call_;
  const int64_t batch_size_;
  const bool decoupled_;
  const Clock::time_point execution_start_;
  const std::shared_ptr<OpenRequests> registry_;
  bool finished_ CHORUS_GUARDED_BY(mu_) = false;
  // A model that answers once: the response it sent before the final flag.
  std::optional<ModelResponse> kept_ CHORUS_GUARDED_BY(mu_);
};

// A model's open requests. Drain waits for their final responses.
class OpenRequests {
 public:
  using Clock = std::chrono::steady_clock;

  void Add(const std::shared_ptr<OpenRequest>& request) CHORUS_EXCLUDES(mu_);
  // Forgets `request`, which finished.
  void Remove(const OpenRequest* request) CHORUS_EXCLUDES(mu_);
  size_t size() const CHORUS_EXCLUDES(mu_);
  // Waits until `deadline` for every open request to finish; fails those
  // still open then with UNAVAILABLE.
  void Drain(Clock::time_point deadline) CHORUS_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  CondVar changed_;
  std::map<const OpenRequest*, std::shared_ptr<OpenRequest>> open_ CHORUS_GUARDED_BY(mu_);
};

}  // namespace chorus::python_backend

#endif  // CHORUS_SERVER_PYTHON_BACKEND_SRC_OPEN_REQUESTS_H_
