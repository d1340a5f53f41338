// Triton's sequence batcher, for stateful models: each request names its
// sequence (a correlation id) and whether it starts or ends it; a sequence's
// requests run one at a time, in order, and the model gets what Triton gives
// it: control inputs (START, END, READY, CORRID) chorus fills in, and implicit
// state (an output carried to the next request's input); a model that
// answers its requests itself (request_executor.h) sees each request's
// sequence id and flags instead. Two strategies:
//   direct: a sequence is pinned to one interpreter (a lane; an executor's
//           instance) for its life, so a Python model may also keep its own
//           state per correlation id there; requests of the lane's sequences
//           are batched together;
//   oldest: requests of any sequences are batched together (one per
//           sequence), on any interpreter: state must be implicit state.
// A sequence idle past max_idle is ended and its state freed. Nothing
// survives a restart of the serving process.
#ifndef CHORUS_SERVING_SEQUENCE_BATCHER_H_
#define CHORUS_SERVING_SEQUENCE_BATCHER_H_

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/package/model.h"
#include "chorus/serving/request_executor.h"
#include "chorus/serving/scheduler.h"
#include "chorus/serving/scheduling_options.h"

namespace chorus {

struct SequenceRequest {
  CorrelationId id;
  bool start = false;     // resets the sequence's state (a new sequence if unknown)
  bool end = false;       // the sequence ends, its state freed, once this request ran
  InferenceRequest call;  // the client's inputs, in ClientSignature order
};

class SequenceBatcher {
 public:
  // The signature clients see: `model`'s without its control and state
  // inputs and state outputs. INVALID_ARGUMENT naming a control or state
  // tensor the model does not have, or one given twice.
  static StatusOr<Manifest> ClientSignature(const Manifest& model,
                                            const SequenceBatching& sequences);
  // A batcher over `model` (a manifest required); `options` as for a
  // ModelScheduler (workers: the interpreters, one lane each for kDirect).
  // Errors: ClientSignature's.
  static StatusOr<std::unique_ptr<SequenceBatcher>> Create(
      std::shared_ptr<Model> model, SequenceBatching sequences, SchedulerOptions options,
      std::function<void(const ExecutionStats&)> on_execution = nullptr);
  // A batcher over `executor` (request_executor.h), whose requests carry
  // `signature`'s inputs: no control or state tensors (INVALID_ARGUMENT for
  // `sequences` naming any); kDirect pins each sequence to one of its
  // instances. The executor sees each request's sequence id and flags
  // (InferenceRequest::correlation_id, flags).
  static StatusOr<std::unique_ptr<SequenceBatcher>> Create(
      std::shared_ptr<RequestExecutor> executor, Manifest signature, SequenceBatching sequences,
      SchedulerOptions options, std::function<void(const ExecutionStats&)> on_execution = nullptr);
  // Fails what waits, lets what runs finish.
  ~SequenceBatcher();
  SequenceBatcher(const SequenceBatcher&) = delete;
  SequenceBatcher& operator=(const SequenceBatcher&) = delete;

  // Queues `request` behind its sequence's earlier ones; `done` is called
  // once, with the client's outputs (state outputs kept back), from a worker
  // or right away: INVALID_ARGUMENT for a request naming no sequence, or a
  // sequence that is not active and a request that does not start one (where
  // the config asks for them), or an id the CORRID input cannot hold;
  // UNAVAILABLE when full (the queue, the sequences, the sequence's waiting
  // requests) or draining. Thread-safe.
  void Submit(SequenceRequest request, ModelScheduler::Done done) CHORUS_EXCLUDES(mu_);
  // As ModelScheduler::Drain.
  void Drain(std::chrono::steady_clock::time_point deadline) CHORUS_EXCLUDES(mu_);
  // Requests waiting or running.
  size_t pending() const CHORUS_EXCLUDES(mu_);
  // Sequences started and not yet ended (by END or idleness).
  size_t active_sequences() const CHORUS_EXCLUDES(mu_);
  // How it batches, as configured.
  const SequenceBatching& config() const { return sequences_config_; }

 private:
  // Where one input of the model comes from.
  struct InputSource {
    enum Kind { kClient, kControl, kState } kind;
    size_t index;             // client input or state
    SequenceControl control;  // kControl
  };
  struct Waiting {
    SequenceRequest request;
    ModelScheduler::Done done;
  };
  struct Sequence {
    int lane = 0;
    bool running = false;
    bool ended = false;  // by END: only a START may follow (any request, if start_unknown)
    std::vector<at::Tensor> state;
    std::deque<Waiting> waiting;
    std::chrono::steady_clock::time_point last_used;
  };

  SequenceBatcher(std::shared_ptr<Model> model, std::shared_ptr<RequestExecutor> executor,
                  Manifest manifest, SequenceBatching sequences, SchedulerOptions options);
  // Makes the lanes (one per instance for kDirect) and starts the reaper.
  void Start(std::function<void(const ExecutionStats&)> on_execution);
  // Why `request` cannot be queued now (OK when it can); `sequence`: its
  // active sequence, or null.
  Status Refusal(const SequenceRequest& request, const Sequence* sequence) const
      CHORUS_REQUIRES(mu_);
  // The model's inputs for `request` in `sequence` (state read under mu_).
  StatusOr<std::vector<c10::IValue>> ModelInputs(const SequenceRequest& request,
                                                 const Sequence& sequence) const
      CHORUS_REQUIRES(mu_);
  // Hands the next waiting request of `id` to its lane (mu_ held; the lane's
  // Submit runs after it is released, through `dispatch`).
  void TakeNext(const CorrelationId& id, Sequence& sequence,
                std::vector<std::function<void()>>* dispatch) CHORUS_REQUIRES(mu_);
  // A request's run came back: state kept, client answered, the next one sent.
  void Finished(const CorrelationId& id, bool end, ModelScheduler::Done done,
                InferenceResult result) CHORUS_EXCLUDES(mu_);
  std::vector<at::Tensor> InitialState() const;
  void ReapIdle() CHORUS_EXCLUDES(mu_);

  const std::shared_ptr<Model> model_;               // or:
  const std::shared_ptr<RequestExecutor> executor_;  // a model that answers requests itself
  const Manifest manifest_;                          // the model's (or the executor's) inputs
  const SequenceBatching sequences_config_;
  const SchedulerOptions options_;
  std::vector<InputSource> inputs_;   // per model input
  std::vector<int> state_of_output_;  // per model output: its state, or -1
  size_t client_outputs_ = 0;

  mutable Mutex mu_;
  CondVar changed_;  // stopping (the reaper waits on it)
  CondVar ran_;      // a run ended (Drain waits on it; the reaper need not wake)
  std::map<CorrelationId, Sequence> active_ CHORUS_GUARDED_BY(mu_);
  std::vector<int> lane_load_ CHORUS_GUARDED_BY(mu_);  // sequences per lane
  size_t waiting_ CHORUS_GUARDED_BY(mu_) = 0;
  size_t running_ CHORUS_GUARDED_BY(mu_) = 0;
  bool accepting_ CHORUS_GUARDED_BY(mu_) = true;
  bool stopping_ CHORUS_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<ModelScheduler>> lanes_;  // after what their callbacks touch
  std::thread reaper_;
};

}  // namespace chorus

#endif  // CHORUS_SERVING_SEQUENCE_BATCHER_H_
