// serving/: how calls reach a loaded model, with no protocol: the per-model
// scheduler (this header: queue, dynamic batching, workers), the values it
// batches (model_values.h), and the generation engines of a generative model
// (generation_engines.h). Used by server/models; knows nothing of server/.
//
// Dispatching inference requests for one model: a bounded queue, dynamic
// batching, and worker threads that run the model on free interpreters.
//
//   ModelScheduler scheduler(model, options);
//   scheduler.Submit(std::move(request), [](InferenceResult result) { ... });
//
// Dynamic batching (Triton's): a worker takes the oldest request and, for up
// to max_queue_delay after it arrived, gathers queued requests with the same
// dtypes and non-batch dimensions until the batch reaches max_batch_size (or a
// preferred size); the inputs are concatenated along batch_dim, the model runs
// once, and every output is split back along batch_dim. Requests past their
// deadline or cancelled are answered without running. A model that answers
// its requests itself (request_executor.h) gets the batch unjoined instead,
// on the worker of one of its instances.
#ifndef CHORUS_SERVING_SCHEDULER_H_
#define CHORUS_SERVING_SCHEDULER_H_

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chorus/common/crash_label.h"
#include "chorus/common/crash_report.h"
#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/model_calls.h"
#include "chorus/package/model.h"
#include "chorus/serving/inference_request.h"
#include "chorus/serving/model_values.h"
#include "chorus/serving/request_executor.h"
#include "chorus/serving/scheduling_options.h"

namespace chorus {

struct SchedulerOptions {
  BatchingOptions batching;
  size_t max_queue = 1024;  // queued requests beyond which Submit answers UNAVAILABLE
  int workers = 1;          // concurrent executions; usually the interpreters
  CrashLabel label;         // what crash reports call the model
  bool decoupled = false;   // the model streams: requests come with on_response
  // >= 0: every execution runs on this interpreter (for a request executor,
  // this instance, with one worker), as a sequence batcher's lane does, whose
  // sequences keep state there; -1: on an idle one.
  int interpreter = -1;
  PriorityOptions priorities;
};

// One model execution, reported after it ran.
struct ExecutionStats {
  int64_t batch_size = 0;
  int requests = 0;
  std::chrono::nanoseconds compute_time{0};
  bool ok = false;
};

class ModelScheduler {
 public:
  using Done = std::function<void(InferenceResult)>;

  // `on_execution`, if set, is called from worker threads after every run.
  ModelScheduler(std::shared_ptr<Model> model, SchedulerOptions options,
                 std::function<void(const ExecutionStats&)> on_execution = nullptr);
  // A scheduler for a model that answers its requests itself: one worker per
  // instance of `executor` (options.workers is ignored), batches handed over
  // unjoined; requests of a stream batch like any other.
  ModelScheduler(std::shared_ptr<RequestExecutor> executor, SchedulerOptions options,
                 std::function<void(const ExecutionStats&)> on_execution = nullptr);
  // Drains with no wait: queued requests are failed, running ones finish.
  ~ModelScheduler();
  ModelScheduler(const ModelScheduler&) = delete;
  ModelScheduler& operator=(const ModelScheduler&) = delete;

  // Queues `request`; `done` is called exactly once, from a worker thread, or
  // right away (UNAVAILABLE: queue full or draining). Thread-safe.
  void Submit(InferenceRequest request, Done done) CHORUS_EXCLUDES(mu_);

  // Submit, but runs `request` on the calling thread, before returning, when
  // a worker would take it alone at once anyway (nothing queued, a worker
  // idle, no batching delay to wait out, not a stream): a caller that would
  // only wait for the answer (an in-process model call) saves the hand-off
  // to a worker and back. An executor's request runs there as one of its
  // idle instances, whose worker takes nothing until it is done (an
  // instance's executions never overlap). The caller keeps the scheduler
  // alive until it returns.
  void SubmitOrRun(InferenceRequest request, Done done) CHORUS_EXCLUDES(mu_);

  // Stops accepting; waits until `deadline` for queued and running requests
  // to finish, then fails what is still queued with UNAVAILABLE. Thread-safe.
  void Drain(std::chrono::steady_clock::time_point deadline) CHORUS_EXCLUDES(mu_);

  // Queued plus running requests.
  size_t pending() const CHORUS_EXCLUDES(mu_);
  // The model it runs; nullptr for an executor's.
  const std::shared_ptr<Model>& model() const { return model_; }

 private:
  struct Pending {
    InferenceRequest request;
    Done done;
    std::chrono::steady_clock::time_point enqueued;
    int64_t batch_size;  // along batch_dim (1 when not batching)
    int level = 0;       // the queue is ordered by it, then by arrival
    std::chrono::steady_clock::time_point expires = std::chrono::steady_clock::time_point::max();
  };

  void StartWorkers(int count);
  // Whether worker `index` may take a batch from the queue now.
  bool CanTake(int index) const CHORUS_REQUIRES(mu_);
  // Claims a way to run a request on the calling thread at once, if there is
  // one: false, or true with `worker` the executor's idle instance now marked
  // busy (-1 for a model, whose caller's run counts as a worker's).
  bool ClaimCallerRun(int* worker) CHORUS_REQUIRES(mu_);
  // Worker `index`'s loop (an executor's: its instance `index`).
  void WorkerLoop(int index) CHORUS_EXCLUDES(mu_);
  // The rows `request` brings to a batch along the batch dimension.
  int64_t BatchSizeOf(const InferenceRequest& request) const;
  // Takes the next batch from the queue, waiting for stragglers as allowed.
  std::vector<Pending> NextBatch() CHORUS_REQUIRES(mu_);
  bool Compatible(const Pending& a, const Pending& b) const;
  // Adds ", requests <ids>" to `context` (which names the label): what a
  // crash report says this batch was. Allocates nothing (it runs for every execution).
  void DescribeForCrashReport(const std::vector<Pending>& batch, ScopedCrashContext& context) const;
  // Runs `batch` on worker `worker`'s behalf (-1: the caller's thread).
  void Execute(std::vector<Pending> batch, int worker);
  // An executor's batch: handed over, each request answered by the executor.
  void ExecuteRequests(std::vector<Pending> batch, int worker,
                       std::chrono::steady_clock::time_point start);
  // What calls the model makes to other models while running `batch` carry:
  // its latest deadline, its call paths and this model, its cancellation
  // (a batch of one).
  ModelCallContext CallContextOf(const std::vector<Pending>& batch) const;
  // The batch's inputs joined, the model run once (until the latest of its
  // deadlines) and its outputs checked to hold `total` rows.
  StatusOr<std::vector<c10::IValue>> RunBatch(const std::vector<Pending>& batch,
                                              int64_t total) const;
  // Logs a model's Python error with its traceback (clients get no traceback).
  void LogPythonError(const Status& status) const;
  // Runs one decoupled request (request.on_response set) to its end.
  void ExecuteDecoupled(Pending& pending, std::chrono::steady_clock::time_point start);
  // Answers requests that expired or were cancelled while queued.
  bool Answered(Pending& pending);
  // `request` placed in the queue by its priority, or why it is refused.
  Status Enqueue(InferenceRequest& request, Done& done, int64_t batch_size) CHORUS_REQUIRES(mu_);
  // Requests past their queue timeout: rejected ones taken out (into
  // `rejected`), delayed ones moved behind all others.
  void ApplyQueueTimeouts(std::vector<Pending>* rejected) CHORUS_REQUIRES(mu_);

  const std::shared_ptr<Model> model_;
  const std::shared_ptr<RequestExecutor> executor_;  // set instead of model_
  const SchedulerOptions options_;
  const std::function<void(const ExecutionStats&)> on_execution_;

  mutable Mutex mu_;
  CondVar changed_;  // queue grew, or stopping: the workers wait on it
  // A run ended: Drain waits on it. Not changed_: a worker ending a run would
  // wake an idle worker for nothing (a context switch per request).
  CondVar ran_;
  std::deque<Pending> queue_ CHORUS_GUARDED_BY(mu_);
  // An executor's instances, by worker index: whether one runs a batch, on
  // its worker or on a caller's thread (SubmitOrRun); a worker takes nothing
  // while a caller runs its instance. Empty for a model's scheduler.
  std::vector<bool> instance_busy_ CHORUS_GUARDED_BY(mu_);
  int callers_running_ CHORUS_GUARDED_BY(mu_) = 0;  // an executor's runs on callers' threads
  std::map<int, size_t> queued_by_level_ CHORUS_GUARDED_BY(mu_);
  size_t running_ CHORUS_GUARDED_BY(mu_) = 0;  // requests
  int executions_ CHORUS_GUARDED_BY(mu_) = 0;  // model runs (workers' and callers')
  bool accepting_ CHORUS_GUARDED_BY(mu_) = true;
  bool stopping_ CHORUS_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

// The outputs of a model call, in `manifest` output order: a tensor or a
// string tensor (one output), a tuple or list of them, or a dict keyed by
// output name. A list of str is one string tensor, not a list of outputs.
StatusOr<std::vector<c10::IValue>> FlattenOutputs(const c10::IValue& value,
                                                  const Manifest* manifest);

}  // namespace chorus

#endif  // CHORUS_SERVING_SCHEDULER_H_
