#include "chorus/serving/scheduler.h"

#include <ATen/core/ivalue.h>
#include <pthread.h>

#include <algorithm>
#include <limits>

#include "chorus/common/logging.h"
#include "chorus/common/process_stats.h"

namespace chorus {

using Clock = std::chrono::steady_clock;

namespace {

// Set on a worker thread while it runs WorkerLoop: the loop's flag that the
// scheduler was destroyed by this very thread. That happens when a request's
// callback held the last reference to what owns the scheduler (a model being
// unloaded or shut down), and it dropped on the worker.
thread_local bool* t_destroyed_by_this_worker = nullptr;

}  // namespace

ModelScheduler::ModelScheduler(std::shared_ptr<Model> model, SchedulerOptions options,
                               std::function<void(const ExecutionStats&)> on_execution)
    : model_(std::move(model)),
      options_(std::move(options)),
      on_execution_(std::move(on_execution)) {
  StartWorkers(std::max(1, options_.workers));
}

ModelScheduler::ModelScheduler(std::shared_ptr<RequestExecutor> executor, SchedulerOptions options,
                               std::function<void(const ExecutionStats&)> on_execution)
    : executor_(std::move(executor)),
      options_(std::move(options)),
      on_execution_(std::move(on_execution)) {
  // Pinned to one instance (a sequence batcher's lane): that instance's one
  // worker, as its executions must not overlap.
  const int workers = options_.interpreter >= 0 ? 1 : std::max(1, executor_->instances());
  {
    MutexLock lock(&mu_);
    instance_busy_.assign(workers, false);
  }
  StartWorkers(workers);
}

void ModelScheduler::StartWorkers(int count) {
  for (int i = 0; i < count; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ModelScheduler::~ModelScheduler() {
  Drain(Clock::now());
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  changed_.SignalAll();
  for (auto& worker : workers_) {
    if (worker.get_id() != std::this_thread::get_id()) {
      worker.join();
      continue;
    }
    // A thread cannot join itself: this worker returns from its loop without
    // touching the scheduler again.
    *t_destroyed_by_this_worker = true;
    worker.detach();
  }
}

int64_t ModelScheduler::BatchSizeOf(const InferenceRequest& request) const {
  if (!options_.batching.enabled) return 1;
  // The first input given (an optional one may be left out).
  auto given = std::find_if(request.inputs.begin(), request.inputs.end(),
                            [](const c10::IValue& input) { return !input.isNone(); });
  if (given == request.inputs.end()) return 1;
  const std::vector<int64_t> shape = ShapeOf(*given);
  if (static_cast<int64_t>(shape.size()) <= options_.batching.batch_dim) return 1;
  return shape[options_.batching.batch_dim];
}

bool ModelScheduler::ClaimCallerRun(int* worker) {
  *worker = -1;
  if (!accepting_ || !queue_.empty()) return false;
  if (!executor_) {
    if (executions_ >= std::max(1, options_.workers)) return false;
  } else {
    auto idle = std::find(instance_busy_.begin(), instance_busy_.end(), false);
    if (idle == instance_busy_.end()) return false;
    *idle = true;
    *worker = static_cast<int>(idle - instance_busy_.begin());
    ++callers_running_;
  }
  ++executions_;
  ++running_;
  return true;
}

void ModelScheduler::SubmitOrRun(InferenceRequest request, Done done) {
  // A stream, or a batch that waits for stragglers, is the workers' to gather.
  if (request.on_response || options_.batching.max_queue_delay.count() > 0) {
    return Submit(std::move(request), std::move(done));
  }
  int worker = -1;
  bool here = false;
  {
    MutexLock lock(&mu_);
    here = ClaimCallerRun(&worker);
  }
  if (!here) return Submit(std::move(request), std::move(done));
  std::vector<Pending> batch;
  const int64_t batch_size = BatchSizeOf(request);
  batch.push_back(Pending{std::move(request), std::move(done), Clock::now(), batch_size});
  Execute(std::move(batch), worker);
  bool queued = false;
  {
    MutexLock lock(&mu_);
    --executions_;
    --running_;
    if (worker >= 0) {
      instance_busy_[worker] = false;
      --callers_running_;
      queued = !queue_.empty();
    }
  }
  // The instance's worker may have passed over requests queued meanwhile.
  if (queued) changed_.SignalAll();
  ran_.SignalAll();  // Drain() may be waiting
}

void ModelScheduler::Submit(InferenceRequest request, Done done) {
  const int64_t batch_size = BatchSizeOf(request);
  Status refused;
  bool wake_all = false;
  {
    MutexLock lock(&mu_);
    refused = Enqueue(request, done, batch_size);
    wake_all = callers_running_ > 0;
  }
  if (refused.ok()) {
    // While a caller runs an instance, the one worker woken could be its.
    wake_all ? changed_.SignalAll() : changed_.Signal();
    return;
  }
  InferenceResult result;
  result.status = std::move(refused);
  done(std::move(result));
}

Status ModelScheduler::Enqueue(InferenceRequest& request, Done& done, int64_t batch_size) {
  if (!accepting_) return UnavailableError("the model is being unloaded or the server is draining");
  if (queue_.size() >= options_.max_queue) {
    return UnavailableError("the model's queue is full (" + std::to_string(options_.max_queue) +
                            " requests); retry later");
  }
  const PriorityOptions& priorities = options_.priorities;
  const int level = priorities.levels == 0  ? 0
                    : request.priority == 0 ? priorities.default_level
                                            : request.priority;
  const QueuePolicy& policy = priorities.PolicyOf(level);
  if (policy.max_queue_size > 0 && queued_by_level_[level] >= policy.max_queue_size) {
    return UnavailableError("the model's queue for priority level " + std::to_string(level) +
                            " is full (" + std::to_string(policy.max_queue_size) +
                            " requests); retry later");
  }
  const Clock::time_point now = Clock::now();
  Pending pending{std::move(request), std::move(done), now, batch_size, level};
  std::chrono::microseconds timeout = policy.default_timeout;
  if (policy.allow_timeout_override && pending.request.timeout.count() > 0) {
    timeout = pending.request.timeout;
  }
  if (timeout.count() > 0) pending.expires = now + timeout;
  // Ordered by level, then arrival: after every request of its level or a higher one.
  auto at = std::upper_bound(queue_.begin(), queue_.end(), level,
                             [](int value, const Pending& queued) { return value < queued.level; });
  queue_.insert(at, std::move(pending));
  ++queued_by_level_[level];
  return OkStatus();
}

void ModelScheduler::ApplyQueueTimeouts(std::vector<Pending>* rejected) {
  auto times_out = [](const QueuePolicy& policy) {
    return policy.default_timeout.count() > 0 || policy.allow_timeout_override;
  };
  const PriorityOptions& priorities = options_.priorities;
  bool any = times_out(priorities.default_policy);
  for (const auto& [level, policy] : priorities.policies) any = any || times_out(policy);
  if (!any) return;  // the common case: no scan of the queue
  const Clock::time_point now = Clock::now();
  std::vector<Pending> delayed;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->expires > now) {
      ++it;
      continue;
    }
    const QueuePolicy& policy = options_.priorities.PolicyOf(it->level);
    --queued_by_level_[it->level];
    it->expires = Clock::time_point::max();  // delayed once
    if (policy.timeout_action == QueuePolicy::TimeoutAction::kReject) {
      rejected->push_back(std::move(*it));
    } else {
      it->level = std::numeric_limits<int>::max();  // behind all that have not timed out
      ++queued_by_level_[it->level];
      delayed.push_back(std::move(*it));
    }
    it = queue_.erase(it);
  }
  for (Pending& pending : delayed) queue_.push_back(std::move(pending));
}

void ModelScheduler::Drain(Clock::time_point deadline) {
  std::deque<Pending> abandoned;
  {
    MutexLock lock(&mu_);
    accepting_ = false;
    while ((!queue_.empty() || running_ > 0) && Clock::now() < deadline) {
      ran_.WaitUntil(&mu_, std::min(deadline, Clock::now() + std::chrono::milliseconds(50)));
    }
    abandoned.swap(queue_);
    queued_by_level_.clear();
  }
  for (Pending& pending : abandoned) {
    InferenceResult result;
    result.status = UnavailableError("the model was unloaded before this request ran");
    pending.done(std::move(result));
  }
}

size_t ModelScheduler::pending() const {
  MutexLock lock(&mu_);
  return queue_.size() + running_;
}

bool ModelScheduler::Answered(Pending& pending) {
  Status status;
  if (pending.request.cancelled && pending.request.cancelled->load()) {
    status = Status(StatusCode::kCancelled, "the client cancelled the request");
  } else if (Clock::now() >= pending.request.deadline) {
    status = DeadlineExceededError("the request's deadline passed while it was queued");
  }
  if (status.ok()) return false;
  InferenceResult result;
  result.status = std::move(status);
  result.queue_time = Clock::now() - pending.enqueued;
  pending.done(std::move(result));
  return true;
}

void ModelScheduler::DescribeForCrashReport(const std::vector<Pending>& batch,
                                            ScopedCrashContext& context) const {
  context.Append(batch.size() > 1 ? ", requests " : ", request ");
  for (size_t i = 0; i < batch.size(); ++i) {
    if (i > 0) context.Append(", ");
    const std::string& id = batch[i].request.id;
    context.Append(id.empty() ? std::string_view("(no id)") : id);
  }
}

bool ModelScheduler::Compatible(const Pending& a, const Pending& b) const {
  // A generator's stream runs alone; an executor's requests of streams batch.
  if (!executor_ && (a.request.on_response || b.request.on_response)) return false;
  const auto& x = a.request.inputs;
  const auto& y = b.request.inputs;
  if (x.size() != y.size()) return false;
  const int64_t dim = options_.batching.batch_dim;
  // Equal but along the batch dimension, which both must have.
  auto joinable = [dim](c10::IntArrayRef xs, c10::IntArrayRef ys) {
    if (xs.size() != ys.size() || static_cast<int64_t>(xs.size()) <= dim) return false;
    for (size_t d = 0; d < xs.size(); ++d) {
      if (static_cast<int64_t>(d) != dim && xs[d] != ys[d]) return false;
    }
    return true;
  };
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].isNone() || y[i].isNone()) {
      if (x[i].isNone() != y[i].isNone()) return false;  // one left an optional input out
      continue;
    }
    if (x[i].isTensor() != y[i].isTensor()) return false;
    if (x[i].isTensor()) {
      // Under the queue's lock: the tensors' own sizes, nothing allocated.
      const at::Tensor& a_tensor = x[i].toTensor();
      const at::Tensor& b_tensor = y[i].toTensor();
      if (a_tensor.scalar_type() != b_tensor.scalar_type() ||
          !joinable(a_tensor.sizes(), b_tensor.sizes())) {
        return false;
      }
    } else if (dim != 0 || !joinable(ShapeOf(x[i]), ShapeOf(y[i]))) {
      return false;  // lists of str join along dim 0 only
    }
  }
  return true;
}

std::vector<ModelScheduler::Pending> ModelScheduler::NextBatch() {
  std::vector<Pending> batch;
  --queued_by_level_[queue_.front().level];
  batch.push_back(std::move(queue_.front()));
  queue_.pop_front();
  const BatchingOptions& batching = options_.batching;
  if (!batching.enabled) return batch;
  int64_t size = batch.front().batch_size;
  const Clock::time_point until = batch.front().enqueued + batching.max_queue_delay;
  auto preferred = [&](int64_t n) {
    return std::find(batching.preferred_batch_sizes.begin(), batching.preferred_batch_sizes.end(),
                     n) != batching.preferred_batch_sizes.end();
  };
  while (size < batching.max_batch_size && !preferred(size)) {
    // Take the queued requests that fit, in order.
    for (auto it = queue_.begin(); it != queue_.end() && size < batching.max_batch_size;) {
      if (size + it->batch_size <= batching.max_batch_size && Compatible(batch.front(), *it)) {
        size += it->batch_size;
        --queued_by_level_[it->level];
        batch.push_back(std::move(*it));
        it = queue_.erase(it);
        if (preferred(size)) break;
      } else {
        ++it;
      }
    }
    if (size >= batching.max_batch_size || preferred(size) || Clock::now() >= until || stopping_) {
      break;
    }
    changed_.WaitUntil(&mu_, until);
  }
  return batch;
}

void ModelScheduler::WorkerLoop(int index) {
  // What top -H, perf and the benchmarks' CPU breakdown see running models.
  pthread_setname_np(pthread_self(), "chorus-worker");
  bool destroyed = false;
  t_destroyed_by_this_worker = &destroyed;
  while (true) {
    std::vector<Pending> batch, rejected;
    {
      MutexLock lock(&mu_);
      while (!CanTake(index) && !(stopping_ && queue_.empty())) changed_.Wait(&mu_);
      if (!CanTake(index)) return;  // stopping, nothing queued
      ApplyQueueTimeouts(&rejected);
      if (!queue_.empty()) batch = NextBatch();
      running_ += batch.size();
      executions_ += batch.empty() ? 0 : 1;
      if (!batch.empty() && executor_) instance_busy_[index] = true;
    }
    for (Pending& pending : rejected) {
      InferenceResult result;
      result.status = UnavailableError("the request timed out in the model's queue");
      result.queue_time = Clock::now() - pending.enqueued;
      pending.done(std::move(result));
    }
    if (destroyed) return;  // a callback released what owns `this`
    if (batch.empty()) continue;
    const size_t taken = batch.size();
    Execute(std::move(batch), index);  // the batch's callbacks are destroyed with it
    if (destroyed) return;             // `this` is gone
    {
      MutexLock lock(&mu_);
      running_ -= taken;
      --executions_;
      if (executor_) instance_busy_[index] = false;
    }
    ran_.SignalAll();  // Drain() may be waiting
  }
}

bool ModelScheduler::CanTake(int index) const {
  return !queue_.empty() && (!executor_ || !instance_busy_[index]);
}

StatusOr<std::vector<c10::IValue>> ModelScheduler::RunBatch(const std::vector<Pending>& batch,
                                                            int64_t total) const {
  const int64_t dim = options_.batching.batch_dim;
  Clock::time_point deadline = Clock::time_point::min();
  for (const Pending& p : batch) {
    deadline = std::max(deadline, p.request.deadline);  // never cut a request short
  }
  std::vector<c10::IValue> inputs;
  const size_t num_inputs = batch.front().request.inputs.size();
  for (size_t i = 0; i < num_inputs; ++i) {
    if (batch.size() == 1) {
      inputs.emplace_back(batch.front().request.inputs[i]);
    } else {
      std::vector<c10::IValue> parts;
      for (const Pending& p : batch) parts.push_back(p.request.inputs[i]);
      inputs.push_back(ConcatValues(parts, dim));
    }
  }
  CHORUS_ASSIGN_OR_RETURN(c10::IValue output,
                          model_->Forward(inputs, CallOptions{deadline, options_.interpreter}));
  CHORUS_ASSIGN_OR_RETURN(std::vector<c10::IValue> outputs,
                          FlattenOutputs(output, model_->manifest()));
  if (batch.size() == 1) return outputs;
  for (const c10::IValue& value : outputs) {
    const std::vector<int64_t> shape = ShapeOf(value);
    const int64_t rows = static_cast<int64_t>(shape.size()) > dim ? shape[dim] : 0;
    if (rows != total) {
      return InternalError("the model returned an output with " + std::to_string(rows) +
                           " rows along the batch dimension for a batch of " +
                           std::to_string(total));
    }
  }
  return outputs;
}

ModelCallContext ModelScheduler::CallContextOf(const std::vector<Pending>& batch) const {
  ModelCallContext context;
  context.deadline = Clock::time_point::min();
  for (const Pending& p : batch) {
    context.deadline = std::max(context.deadline, p.request.deadline);  // as RunBatch's
    for (const std::string& caller : p.request.call_path) {
      if (std::find(context.call_path.begin(), context.call_path.end(), caller) ==
          context.call_path.end()) {
        context.call_path.push_back(caller);
      }
    }
  }
  context.call_path.push_back(options_.label.name());
  if (batch.size() == 1) context.cancelled = batch.front().request.cancelled;
  return context;
}

void ModelScheduler::Execute(std::vector<Pending> batch, int worker) {
  // Requests that expired or were cancelled in the queue are answered now.
  batch.erase(std::remove_if(batch.begin(), batch.end(), [&](Pending& p) { return Answered(p); }),
              batch.end());
  if (batch.empty()) return;
  ScopedCrashContext crash_context(options_.label.text());
  DescribeForCrashReport(batch, crash_context);
  const ModelCallContext call_context = CallContextOf(batch);
  ScopedModelCallContext calls_made_here(&call_context);
  const Clock::time_point start = Clock::now();
  if (executor_) return ExecuteRequests(std::move(batch), worker, start);
  if (batch.front().request.on_response) return ExecuteDecoupled(batch.front(), start);
  int64_t total = 0;
  for (const Pending& p : batch) total += p.batch_size;
  StatusOr<std::vector<c10::IValue>> outputs = RunBatch(batch, total);
  const auto compute = Clock::now() - start;
  NoteMemoryActivity();
  if (!outputs.ok()) LogPythonError(outputs.status());
  if (on_execution_) {
    on_execution_(ExecutionStats{total, static_cast<int>(batch.size()), compute, outputs.ok()});
  }
  int64_t offset = 0;
  for (Pending& p : batch) {
    InferenceResult result;
    result.batch_size = total;
    result.queue_time = start - p.enqueued;
    result.compute_time = compute;
    if (!outputs.ok()) {
      result.status = outputs.status();
    } else if (batch.size() == 1) {
      result.outputs = *outputs;
    } else {
      for (const c10::IValue& value : *outputs) {
        result.outputs.push_back(
            SliceValue(value, options_.batching.batch_dim, offset, p.batch_size));
      }
    }
    offset += p.batch_size;
    p.done(std::move(result));
  }
}

void ModelScheduler::ExecuteRequests(std::vector<Pending> batch, int worker,
                                     Clock::time_point start) {
  int64_t total = 0;
  std::vector<ExecutorRequest> requests;
  requests.reserve(batch.size());
  for (Pending& p : batch) {
    total += p.batch_size;
    requests.push_back(
        ExecutorRequest{std::move(p.request), std::move(p.done), start - p.enqueued, p.batch_size});
  }
  const int instance = options_.interpreter >= 0 ? options_.interpreter : std::max(0, worker);
  Status ran = executor_->Execute(instance, std::move(requests));
  NoteMemoryActivity();
  if (on_execution_) {
    on_execution_(
        ExecutionStats{total, static_cast<int>(batch.size()), Clock::now() - start, ran.ok()});
  }
}

void ModelScheduler::LogPythonError(const Status& status) const {
  if (status.python_error() == nullptr) return;
  Log().warn("model {} failed: {}\n{}", model_->manifest() ? model_->manifest()->model_name : "?",
             status.message(), status.python_error()->traceback);
}

void ModelScheduler::ExecuteDecoupled(Pending& pending, Clock::time_point start) {
  InferenceRequest& request = pending.request;
  Status stopped;
  Status status = model_->ForwardEach(
      request.inputs, CallOptions{request.deadline, options_.interpreter},
      [&](const c10::IValue& value) {
        if (request.cancelled != nullptr && request.cancelled->load()) {
          stopped = Status(StatusCode::kCancelled, "the client went away");
          return false;
        }
        StatusOr<std::vector<c10::IValue>> outputs = FlattenOutputs(value, model_->manifest());
        if (!outputs.ok()) {
          stopped = outputs.status();
          return false;
        }
        ModelResponse response;
        response.outputs = std::move(*outputs);
        return request.on_response(std::move(response));
      });
  if (status.ok()) status = stopped;
  const auto compute = Clock::now() - start;
  NoteMemoryActivity();
  LogPythonError(status);
  if (on_execution_) on_execution_(ExecutionStats{1, 1, compute, status.ok()});
  InferenceResult result;
  result.status = std::move(status);
  result.batch_size = 1;
  result.queue_time = start - pending.enqueued;
  result.compute_time = compute;
  pending.done(std::move(result));
}

StatusOr<std::vector<c10::IValue>> FlattenOutputs(const c10::IValue& value,
                                                  const Manifest* manifest) {
  std::vector<c10::IValue> outputs;
  auto add = [&](const c10::IValue& item) {
    if (!item.isTensor() && !IsStringValue(item)) return false;
    outputs.push_back(item);
    return true;
  };
  const bool one_string_output = manifest != nullptr && manifest->outputs.size() == 1 &&
                                 manifest->outputs[0].dtype == "string" && value.isList();
  bool ok = true;
  if (value.isTensor() || IsStringValue(value) || one_string_output) {
    outputs.push_back(value);
  } else if (value.isTuple()) {
    for (const c10::IValue& item : value.toTupleRef().elements()) ok = ok && add(item);
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) ok = ok && add(item);
  } else if (value.isGenericDict() && manifest != nullptr) {
    auto dict = value.toGenericDict();
    for (const TensorSpec& spec : manifest->outputs) {
      auto it = dict.find(spec.name);
      if (it == dict.end()) return InternalError("the model's output has no \"" + spec.name + "\"");
      ok = ok && add(it->value());
    }
  } else {
    ok = false;
  }
  if (!ok) {
    return InternalError(
        "the model must return a tensor or a list of str, or a tuple, list or dict of them (got " +
        std::string(value.tagKind()) + ")");
  }
  if (manifest != nullptr && outputs.size() != manifest->outputs.size()) {
    return InternalError("the model returned " + std::to_string(outputs.size()) +
                         " outputs; its manifest declares " +
                         std::to_string(manifest->outputs.size()));
  }
  return outputs;
}

}  // namespace chorus
