#include "chorus/serving/sequence_batcher.h"

#include <algorithm>

#include "chorus/common/random_id.h"
#include "chorus/package/dtype.h"
#include "chorus/package/torch_dtype.h"
#include "chorus/serving/model_values.h"

namespace chorus {

using Clock = std::chrono::steady_clock;

namespace {

int FindTensor(const std::vector<TensorSpec>& tensors, const std::string& name) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// A tensor of `spec`'s one-row shape and dtype filled with `value`.
c10::IValue Filled(const TensorSpec& spec, int64_t value) {
  return FilledValue(spec.dtype, WithAnySizeAsOne(spec.shape), value);
}

// A request naming no sequence: id 0 or "".
bool NamesNoSequence(const CorrelationId& id) {
  return std::holds_alternative<uint64_t>(id) ? std::get<uint64_t>(id) == 0
                                              : std::get<std::string>(id).empty();
}

}  // namespace

std::string CorrelationIdText(const CorrelationId& id) {
  if (const auto* number = std::get_if<uint64_t>(&id)) return std::to_string(*number);
  return "\"" + std::get<std::string>(id) + "\"";
}

StatusOr<Manifest> SequenceBatcher::ClientSignature(const Manifest& model,
                                                    const SequenceBatching& sequences) {
  std::vector<std::string> hidden_inputs, hidden_outputs;
  for (const auto& [input, control] : sequences.controls) hidden_inputs.push_back(input);
  for (const auto& [input, output] : sequences.states) {
    hidden_inputs.push_back(input);
    hidden_outputs.push_back(output);
  }
  auto check = [](const std::vector<TensorSpec>& tensors, const std::vector<std::string>& names,
                  const char* what) -> Status {
    for (size_t i = 0; i < names.size(); ++i) {
      if (FindTensor(tensors, names[i]) < 0) {
        return InvalidArgumentError("sequence_batching: the model has no " + std::string(what) +
                                    " \"" + names[i] + "\"");
      }
      if (std::find(names.begin(), names.begin() + i, names[i]) != names.begin() + i) {
        return InvalidArgumentError("sequence_batching: " + std::string(what) + " \"" + names[i] +
                                    "\" is given twice");
      }
    }
    return OkStatus();
  };
  CHORUS_RETURN_IF_ERROR(check(model.inputs, hidden_inputs, "input"));
  CHORUS_RETURN_IF_ERROR(check(model.outputs, hidden_outputs, "output"));
  for (const auto& [input, control] : sequences.controls) {
    const std::string& dtype = model.inputs[FindTensor(model.inputs, input)].dtype;
    if (dtype == InfoOf(Dtype::kString).name && control != SequenceControl::kCorrelationId) {
      return InvalidArgumentError("sequence_batching: control input \"" + input +
                                  "\" must be numeric or boolean, not a string");
    }
  }
  Manifest client = model;
  auto keep = [](std::vector<TensorSpec>* tensors, const std::vector<std::string>& hidden) {
    tensors->erase(std::remove_if(tensors->begin(), tensors->end(),
                                  [&](const TensorSpec& spec) {
                                    return std::find(hidden.begin(), hidden.end(), spec.name) !=
                                           hidden.end();
                                  }),
                   tensors->end());
  };
  keep(&client.inputs, hidden_inputs);
  keep(&client.outputs, hidden_outputs);
  return client;
}

StatusOr<std::unique_ptr<SequenceBatcher>> SequenceBatcher::Create(
    std::shared_ptr<Model> model, SequenceBatching sequences, SchedulerOptions options,
    std::function<void(const ExecutionStats&)> on_execution) {
  if (model->manifest() == nullptr)
    return InvalidArgumentError("sequence_batching needs a signature");
  CHORUS_RETURN_IF_ERROR(ClientSignature(*model->manifest(), sequences).status());
  Manifest manifest = *model->manifest();
  std::unique_ptr<SequenceBatcher> batcher(new SequenceBatcher(
      std::move(model), nullptr, std::move(manifest), std::move(sequences), std::move(options)));
  batcher->Start(std::move(on_execution));
  return batcher;
}

StatusOr<std::unique_ptr<SequenceBatcher>> SequenceBatcher::Create(
    std::shared_ptr<RequestExecutor> executor, Manifest signature, SequenceBatching sequences,
    SchedulerOptions options, std::function<void(const ExecutionStats&)> on_execution) {
  if (!sequences.controls.empty() || !sequences.states.empty()) {
    return InvalidArgumentError(
        "sequence_batching: this model takes no control inputs or implicit state (it sees each "
        "request's sequence id and flags itself)");
  }
  std::unique_ptr<SequenceBatcher> batcher(
      new SequenceBatcher(nullptr, std::move(executor), std::move(signature), std::move(sequences),
                          std::move(options)));
  batcher->Start(std::move(on_execution));
  return batcher;
}

void SequenceBatcher::Start(std::function<void(const ExecutionStats&)> on_execution) {
  const bool direct = sequences_config_.strategy == SequenceStrategy::kDirect;
  const int lanes =
      !direct ? 1 : std::max(1, executor_ ? executor_->instances() : options_.workers);
  for (int lane = 0; lane < lanes; ++lane) {
    SchedulerOptions lane_options = options_;
    if (direct) {
      lane_options.workers = 1;
      lane_options.interpreter = lane;
    }
    lanes_.push_back(executor_
                         ? std::make_unique<ModelScheduler>(executor_, lane_options, on_execution)
                         : std::make_unique<ModelScheduler>(model_, lane_options, on_execution));
  }
  {
    MutexLock lock(&mu_);
    lane_load_.assign(lanes, 0);
  }
  reaper_ = std::thread([this] { ReapIdle(); });
}

SequenceBatcher::SequenceBatcher(std::shared_ptr<Model> model,
                                 std::shared_ptr<RequestExecutor> executor, Manifest signature,
                                 SequenceBatching sequences, SchedulerOptions options)
    : model_(std::move(model)),
      executor_(std::move(executor)),
      manifest_(std::move(signature)),
      sequences_config_(std::move(sequences)),
      options_(std::move(options)) {
  const Manifest client = ClientSignature(manifest_, sequences_config_).value();
  for (const TensorSpec& spec : manifest_.inputs) {
    InputSource source{InputSource::kClient, 0, SequenceControl::kStart};
    for (const auto& [name, control] : sequences_config_.controls) {
      if (name == spec.name) source = {InputSource::kControl, 0, control};
    }
    for (size_t s = 0; s < sequences_config_.states.size(); ++s) {
      if (sequences_config_.states[s].first == spec.name) source = {InputSource::kState, s, {}};
    }
    if (source.kind == InputSource::kClient) {
      source.index = static_cast<size_t>(FindTensor(client.inputs, spec.name));
    }
    inputs_.push_back(source);
  }
  for (const TensorSpec& spec : manifest_.outputs) {
    int state = -1;
    for (size_t s = 0; s < sequences_config_.states.size(); ++s) {
      if (sequences_config_.states[s].second == spec.name) state = static_cast<int>(s);
    }
    state_of_output_.push_back(state);
  }
  client_outputs_ = client.outputs.size();
}

SequenceBatcher::~SequenceBatcher() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  changed_.SignalAll();
  if (reaper_.joinable()) reaper_.join();
  Drain(Clock::now());
  lanes_.clear();  // their callbacks (Finished) end before the state they touch goes
}

std::vector<at::Tensor> SequenceBatcher::InitialState() const {
  std::vector<at::Tensor> state;
  for (const auto& [input, output] : sequences_config_.states) {
    state.push_back(Filled(manifest_.inputs[FindTensor(manifest_.inputs, input)], 0).toTensor());
  }
  return state;
}

StatusOr<std::vector<c10::IValue>> SequenceBatcher::ModelInputs(const SequenceRequest& request,
                                                                const Sequence& sequence) const {
  std::vector<c10::IValue> inputs;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const InputSource& source = inputs_[i];
    const TensorSpec& spec = manifest_.inputs[i];
    if (source.kind == InputSource::kClient) {
      inputs.push_back(request.call.inputs.at(source.index));
    } else if (source.kind == InputSource::kState) {
      inputs.push_back(sequence.state.at(source.index));
    } else if (source.control == SequenceControl::kCorrelationId) {
      if (spec.dtype == InfoOf(Dtype::kString).name) {
        const std::vector<int64_t> shape = WithAnySizeAsOne(spec.shape);
        std::string text = std::holds_alternative<std::string>(request.id)
                               ? std::get<std::string>(request.id)
                               : std::to_string(std::get<uint64_t>(request.id));
        inputs.push_back(StringTensorToIValue(StringTensor{shape, {text}}));
      } else if (const auto* number = std::get_if<uint64_t>(&request.id)) {
        inputs.push_back(Filled(spec, static_cast<int64_t>(*number)));
      } else {
        return InvalidArgumentError("sequence " + CorrelationIdText(request.id) +
                                    ": the model's correlation id input \"" + spec.name +
                                    "\" takes numbers, not strings");
      }
    } else {
      const bool on = source.control == SequenceControl::kReady ||
                      (source.control == SequenceControl::kStart && request.start) ||
                      (source.control == SequenceControl::kEnd && request.end);
      inputs.push_back(Filled(spec, on ? 1 : 0));
    }
  }
  return inputs;
}

Status SequenceBatcher::Refusal(const SequenceRequest& request, const Sequence* sequence) const {
  if (NamesNoSequence(request.id)) {
    return InvalidArgumentError(
        "the model is stateful (sequence batching): a request needs a sequence_id, a number > 0 "
        "or a non-empty string");
  }
  if (!accepting_) return UnavailableError("the model is being unloaded or the server is draining");
  if (waiting_ + running_ >= options_.max_queue) {
    return UnavailableError("the model's queue is full (" + std::to_string(options_.max_queue) +
                            " requests); retry later");
  }
  const SequenceBatching& config = sequences_config_;
  if (sequence == nullptr && !request.start && !config.start_unknown) {
    return InvalidArgumentError(
        "sequence " + CorrelationIdText(request.id) +
        " is not active: its first request must set sequence_start (a sequence ends with "
        "sequence_end, or when idle longer than max_sequence_idle_microseconds)");
  }
  if (sequence == nullptr && config.max_sequences > 0 && active_.size() >= config.max_sequences) {
    return UnavailableError("sequence " + CorrelationIdText(request.id) +
                            " cannot start: the model has " + std::to_string(active_.size()) +
                            " sequences active, its most; retry when one ends or is idle");
  }
  if (sequence != nullptr && config.max_waiting_per_sequence > 0 &&
      sequence->waiting.size() >= config.max_waiting_per_sequence) {
    return UnavailableError("sequence " + CorrelationIdText(request.id) + " has " +
                            std::to_string(sequence->waiting.size()) +
                            " requests waiting, its most; retry when one has run");
  }
  return OkStatus();
}

void SequenceBatcher::Submit(SequenceRequest request, ModelScheduler::Done done) {
  if (NamesNoSequence(request.id) && !sequences_config_.new_sequence_prefix.empty()) {
    request.id = sequences_config_.new_sequence_prefix + RandomUuid();
    request.start = true;
  }
  // What a model that answers its requests itself sees of the sequence.
  request.call.correlation_id = request.id;
  if (request.start) request.call.flags |= kSequenceStartFlag;
  if (request.end) request.call.flags |= kSequenceEndFlag;
  Status refused;
  std::vector<std::function<void()>> dispatch;
  {
    MutexLock lock(&mu_);
    auto it = active_.find(request.id);
    refused = Refusal(request, it == active_.end() ? nullptr : &it->second);
    if (refused.ok()) {
      if (it == active_.end()) {
        Sequence sequence;
        sequence.lane = static_cast<int>(std::min_element(lane_load_.begin(), lane_load_.end()) -
                                         lane_load_.begin());
        ++lane_load_[sequence.lane];
        sequence.state = InitialState();
        it = active_.emplace(request.id, std::move(sequence)).first;
      }
      it->second.last_used = Clock::now();
      const CorrelationId id = request.id;
      it->second.waiting.push_back(Waiting{std::move(request), std::move(done)});
      ++waiting_;
      if (!it->second.running) TakeNext(id, it->second, &dispatch);
    }
  }
  for (auto& step : dispatch) step();
  if (refused.ok()) return;
  InferenceResult result;
  result.status = std::move(refused);
  done(std::move(result));
}

void SequenceBatcher::TakeNext(const CorrelationId& id, Sequence& sequence,
                               std::vector<std::function<void()>>* dispatch) {
  auto fail = [dispatch](ModelScheduler::Done done, Status status) {
    dispatch->push_back([done = std::move(done), status = std::move(status)] {
      InferenceResult result;
      result.status = status;
      done(std::move(result));
    });
  };
  while (!sequence.waiting.empty()) {
    Waiting next = std::move(sequence.waiting.front());
    sequence.waiting.pop_front();
    --waiting_;
    if (sequence.ended && !next.request.start && !sequences_config_.start_unknown) {
      fail(std::move(next.done),
           InvalidArgumentError("sequence " + CorrelationIdText(id) +
                                " ended (sequence_end) before this request ran; a new one "
                                "needs sequence_start"));
      continue;
    }
    if (next.request.start || sequence.ended) {  // ended: a start_unknown model's new one
      sequence.state = InitialState();
      sequence.ended = false;
    }
    StatusOr<std::vector<c10::IValue>> inputs = ModelInputs(next.request, sequence);
    if (!inputs.ok()) {
      fail(std::move(next.done), inputs.status());
      continue;
    }
    sequence.running = true;
    ++running_;
    InferenceRequest call = std::move(next.request.call);
    call.inputs = std::move(*inputs);
    ModelScheduler* lane = lanes_[static_cast<size_t>(sequence.lane) % lanes_.size()].get();
    dispatch->push_back([this, lane, id, end = next.request.end, call = std::move(call),
                         done = std::move(next.done)]() mutable {
      lane->Submit(std::move(call),
                   [this, id, end, done = std::move(done)](InferenceResult result) mutable {
                     Finished(id, end, std::move(done), std::move(result));
                   });
    });
    return;
  }
}

void SequenceBatcher::Finished(const CorrelationId& id, bool end, ModelScheduler::Done done,
                               InferenceResult result) {
  std::vector<at::Tensor> state(sequences_config_.states.size());
  if (result.status.ok()) {
    std::vector<c10::IValue> client;
    for (size_t i = 0; i < result.outputs.size() && i < state_of_output_.size(); ++i) {
      const int s = state_of_output_[i];
      if (s < 0) {
        client.push_back(std::move(result.outputs[i]));
      } else if (result.outputs[i].isTensor()) {
        state[s] = result.outputs[i].toTensor();
      } else {
        result.status = InternalError("state output \"" + sequences_config_.states[s].second +
                                      "\" is not a tensor");
      }
    }
    result.outputs = std::move(client);
  }
  std::vector<std::function<void()>> dispatch;
  {
    MutexLock lock(&mu_);
    --running_;
    auto it = active_.find(id);
    if (it != active_.end()) {
      Sequence& sequence = it->second;
      sequence.running = false;
      sequence.last_used = Clock::now();
      if (result.status.ok()) sequence.state = std::move(state);  // a failed run keeps the old
      sequence.ended = sequence.ended || end;
      if (!stopping_) TakeNext(id, sequence, &dispatch);
      if (sequence.ended && !sequence.running && sequence.waiting.empty()) {
        --lane_load_[sequence.lane];
        active_.erase(it);
      }
    }
  }
  ran_.SignalAll();  // Drain may wait
  for (auto& step : dispatch) step();
  done(std::move(result));  // last: it may release what owns this batcher
}

void SequenceBatcher::Drain(Clock::time_point deadline) {
  std::vector<Waiting> abandoned;
  {
    MutexLock lock(&mu_);
    accepting_ = false;
    while (waiting_ + running_ > 0 && Clock::now() < deadline) {
      ran_.WaitUntil(&mu_, std::min(deadline, Clock::now() + std::chrono::milliseconds(50)));
    }
    for (auto& [id, sequence] : active_) {
      for (Waiting& waiting : sequence.waiting) abandoned.push_back(std::move(waiting));
      waiting_ -= sequence.waiting.size();
      sequence.waiting.clear();
    }
  }
  for (Waiting& waiting : abandoned) {
    InferenceResult result;
    result.status = UnavailableError("the model was unloaded before this request ran");
    waiting.done(std::move(result));
  }
  for (auto& lane : lanes_) lane->Drain(deadline);
}

size_t SequenceBatcher::pending() const {
  MutexLock lock(&mu_);
  return waiting_ + running_;
}

size_t SequenceBatcher::active_sequences() const {
  MutexLock lock(&mu_);
  return active_.size();
}

void SequenceBatcher::ReapIdle() {
  const auto period = std::clamp<std::chrono::microseconds>(
      sequences_config_.max_idle / 4, std::chrono::milliseconds(1), std::chrono::milliseconds(250));
  MutexLock lock(&mu_);
  while (!stopping_) {
    const Clock::time_point now = Clock::now();
    for (auto it = active_.begin(); it != active_.end();) {
      const Sequence& sequence = it->second;
      if (!sequence.running && sequence.waiting.empty() &&
          now - sequence.last_used >= sequences_config_.max_idle) {
        --lane_load_[sequence.lane];
        it = active_.erase(it);
      } else {
        ++it;
      }
    }
    // Nothing to end: no need to look again soon (a short max_idle's period
    // would wake this thread every few milliseconds for the model's life).
    changed_.WaitUntil(&mu_, now + (active_.empty() ? std::chrono::milliseconds(250) : period));
  }
}

}  // namespace chorus
