// A model that takes a batch as the list of its requests, each with its own
// inputs and parameters, and answers each request itself, possibly later and
// from another thread: Triton's Python backend, whose execute() gets the
// requests as they came and sends each its responses. The model's
// ModelScheduler queues, orders and batches its requests as any model's,
// without joining their inputs, and hands each batch to the executor on the
// worker of one instance.
#ifndef CHORUS_SERVING_REQUEST_EXECUTOR_H_
#define CHORUS_SERVING_REQUEST_EXECUTOR_H_

#include <chrono>
#include <functional>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/serving/inference_request.h"

namespace chorus {

// One request of a batch, with who to answer.
struct ExecutorRequest {
  InferenceRequest request;
  // Exactly once, from any thread: the one result (a model that answers
  // once), or how a stream ended (on_response set, then no outputs).
  std::function<void(InferenceResult)> done;
  std::chrono::nanoseconds queue_time{0};
  int64_t batch_size = 1;  // the rows it brings to the batch
};

class RequestExecutor {
 public:
  virtual ~RequestExecutor() = default;

  // How many instances run the model: the scheduler runs one worker each, so
  // an instance's executions never overlap (Triton's rule).
  virtual int instances() const = 0;

  // Runs `batch` on instance `instance` (0 <= instance < instances()), on
  // that instance's worker. Every request is answered, exactly once, through
  // its `done` (and its responses through on_response): before Execute
  // returns, or later from any thread (a decoupled model's senders). Errors:
  // why the execution itself failed (its requests were answered with it); an
  // OK status says only that the model ran.
  virtual Status Execute(int instance, std::vector<ExecutorRequest> batch) = 0;

  // Waits until `deadline` for requests answered after their Execute
  // returned; those still open then are failed UNAVAILABLE. Thread-safe.
  virtual void Drain(std::chrono::steady_clock::time_point deadline) = 0;
};

}  // namespace chorus

#endif  // CHORUS_SERVING_REQUEST_EXECUTOR_H_
