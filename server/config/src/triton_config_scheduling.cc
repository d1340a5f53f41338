#include "server/config/src/triton_config_scheduling.h"

#include <algorithm>

namespace chorus::triton_config {
namespace {

using Control = inference::ModelSequenceBatching::Control;

std::chrono::microseconds Micros(uint64_t us) {
  return std::chrono::microseconds(static_cast<int64_t>(std::min<uint64_t>(us, INT64_MAX)));
}

QueuePolicy QueuePolicyOf(const inference::ModelQueuePolicy& policy) {
  QueuePolicy out;
  out.timeout_action = policy.timeout_action() == inference::ModelQueuePolicy::DELAY
                           ? QueuePolicy::TimeoutAction::kDelay
                           : QueuePolicy::TimeoutAction::kReject;
  out.default_timeout = Micros(policy.default_timeout_microseconds());
  out.allow_timeout_override = policy.allow_timeout_override();
  out.max_queue_size = policy.max_queue_size();
  return out;
}

Status MapPriorities(const inference::ModelDynamicBatching& batching, PriorityOptions* out) {
  out->default_policy = QueuePolicyOf(batching.default_queue_policy());
  if (batching.priority_levels() == 0) {
    if (!batching.priority_queue_policy().empty()) {
      return FieldError("dynamic_batching.priority_queue_policy", "needs priority_levels");
    }
    return OkStatus();
  }
  out->levels = static_cast<int>(std::min<uint64_t>(batching.priority_levels(), 1 << 20));
  const uint64_t level = batching.default_priority_level();
  if (level < 1 || level > batching.priority_levels()) {
    return FieldError("dynamic_batching.default_priority_level",
                      "must be within 1 and priority_levels");
  }
  out->default_level = static_cast<int>(level);
  for (const auto& [key, policy] : batching.priority_queue_policy()) {
    if (key < 1 || key > batching.priority_levels()) {
      return FieldError("dynamic_batching.priority_queue_policy." + std::to_string(key),
                        "is not a priority level (1 to priority_levels)");
    }
    out->policies[static_cast<int>(key)] = QueuePolicyOf(policy);
  }
  return OkStatus();
}

Status MapDynamicBatching(const inference::ModelDynamicBatching& batching, ModelConfig* out) {
  out->dynamic_batching = true;
  out->max_queue_delay = Micros(batching.max_queue_delay_microseconds());
  if (batching.preferred_batch_size_size() > 0) {
    out->preferred_batch_sizes.emplace(batching.preferred_batch_size().begin(),
                                       batching.preferred_batch_size().end());
  }
  if (batching.preserve_ordering() && out->instance_count() > 1) {
    return NotHonoured("dynamic_batching.preserve_ordering",
                       "several instances answer as each finishes; with one instance the "
                       "order is kept");
  }
  return MapPriorities(batching, &out->priorities);
}

StatusOr<SequenceControl> ControlKindOf(Control::Kind kind) {
  switch (kind) {
    case Control::CONTROL_SEQUENCE_START:
      return SequenceControl::kStart;
    case Control::CONTROL_SEQUENCE_END:
      return SequenceControl::kEnd;
    case Control::CONTROL_SEQUENCE_READY:
      return SequenceControl::kReady;
    case Control::CONTROL_SEQUENCE_CORRID:
      return SequenceControl::kCorrelationId;
    default:
      return InvalidArgumentError("unknown control kind");
  }
}

// The dtype of a START/END/READY control: its false/true values say, and
// chorus gives 0 and 1 (false and true) only.
StatusOr<std::string> FlagDtypeOf(const Control& control, const std::string& at) {
  auto zero_one = [](const auto& values) {
    return values.size() == 2 && values[0] == 0 && values[1] == 1;
  };
  if (control.int32_false_true_size() > 0) {
    if (!zero_one(control.int32_false_true())) {
      return NotHonoured(at + ".int32_false_true", "chorus gives false 0 and true 1");
    }
    return std::string("int32");
  }
  if (control.fp32_false_true_size() > 0) {
    if (!zero_one(control.fp32_false_true())) {
      return NotHonoured(at + ".fp32_false_true", "chorus gives false 0 and true 1");
    }
    return std::string("float32");
  }
  if (control.bool_false_true_size() == 2 && !control.bool_false_true(0) &&
      control.bool_false_true(1)) {
    return std::string("bool");
  }
  return FieldError(at, "needs its false and true values (int32_false_true: [0, 1], ...)");
}

bool Has(const std::vector<TensorSpec>& tensors, const std::string& name) {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&](const TensorSpec& t) { return t.name == name; });
}

// A control input: the sequence batcher fills it; the model takes it.
Status MapControl(const inference::ModelSequenceBatching::ControlInput& input,
                  const std::string& at, ModelConfig* out, SequenceBatching* sequences) {
  if (input.control_size() != 1) {
    return NotHonoured(at + ".control", "chorus fills an input with one control");
  }
  const Control& control = input.control(0);
  CHORUS_ASSIGN_OR_RETURN(SequenceControl kind, ControlKindOf(control.kind()));
  TensorSpec spec{input.name(), "", {1}};
  if (kind == SequenceControl::kCorrelationId) {
    CHORUS_ASSIGN_OR_RETURN(spec.dtype, DtypeOf(control.data_type(), at + ".control.data_type"));
  } else {
    CHORUS_ASSIGN_OR_RETURN(spec.dtype, FlagDtypeOf(control, at + ".control"));
  }
  if (Has(out->inputs, spec.name)) {
    return FieldError(at + ".name", "\"" + spec.name + "\" is also one of the inputs");
  }
  out->inputs.push_back(std::move(spec));
  sequences->controls.emplace_back(input.name(), kind);
  return OkStatus();
}

// An implicit state: the model takes it as an input and gives it as an output.
Status MapState(const inference::ModelSequenceBatching::State& state, const std::string& at,
                ModelConfig* out, SequenceBatching* sequences) {
  if (state.initial_state_size() > 0) {
    return NotHonoured(at + ".initial_state", "a sequence's state starts as zeros");
  }
  CHORUS_ASSIGN_OR_RETURN(std::string dtype, DtypeOf(state.data_type(), at + ".data_type"));
  const std::vector<int64_t> dims(state.dims().begin(), state.dims().end());
  if (Has(out->inputs, state.input_name()) || Has(out->outputs, state.output_name())) {
    return FieldError(at, "its tensors are also among the inputs or outputs");
  }
  out->inputs.push_back(TensorSpec{state.input_name(), dtype, dims});
  out->outputs.push_back(TensorSpec{state.output_name(), dtype, dims});
  sequences->states.emplace_back(state.input_name(), state.output_name());
  return OkStatus();
}

Status MapStrategy(const inference::ModelSequenceBatching& triton, ModelConfig* out,
                   SequenceBatching* sequences) {
  if (triton.has_oldest()) {
    const auto& oldest = triton.oldest();
    sequences->strategy = SequenceStrategy::kOldest;
    if (oldest.preserve_ordering()) {
      return NotHonoured("sequence_batching.oldest.preserve_ordering", "see dynamic_batching's");
    }
    if (oldest.max_candidate_sequences() > 0) {
      return NotHonoured("sequence_batching.oldest.max_candidate_sequences",
                         "chorus batches up to max_batch_size sequences");
    }
    out->max_queue_delay = Micros(oldest.max_queue_delay_microseconds());
    if (oldest.preferred_batch_size_size() > 0) {
      out->preferred_batch_sizes.emplace(oldest.preferred_batch_size().begin(),
                                         oldest.preferred_batch_size().end());
    }
    return OkStatus();
  }
  sequences->strategy = SequenceStrategy::kDirect;
  if (triton.direct().minimum_slot_utilization() != 0) {
    return NotHonoured("sequence_batching.direct.minimum_slot_utilization",
                       "a lane runs what its sequences have queued");
  }
  out->max_queue_delay = Micros(triton.direct().max_queue_delay_microseconds());
  return OkStatus();
}

Status MapSequenceBatching(const inference::ModelSequenceBatching& triton, ModelConfig* out) {
  if (triton.iterative_sequence()) {
    return NotHonoured("sequence_batching.iterative_sequence",
                       "chorus runs a request once; it is not rescheduled");
  }
  if (out->python_backend) {
    return NotHonoured("sequence_batching",
                       "chorus' sequence batcher serves models loaded from files, not yet "
                       "Python-backend models");
  }
  SequenceBatching sequences;
  sequences.max_idle = Micros(triton.max_sequence_idle_microseconds());
  CHORUS_RETURN_IF_ERROR(MapStrategy(triton, out, &sequences));
  for (int i = 0; i < triton.control_input_size(); ++i) {
    CHORUS_RETURN_IF_ERROR(MapControl(triton.control_input(i),
                                      "sequence_batching.control_input[" + std::to_string(i) + "]",
                                      out, &sequences));
  }
  for (int i = 0; i < triton.state_size(); ++i) {
    CHORUS_RETURN_IF_ERROR(MapState(
        triton.state(i), "sequence_batching.state[" + std::to_string(i) + "]", out, &sequences));
  }
  out->sequence_batching = std::move(sequences);
  return OkStatus();
}

Status MapEnsemble(const inference::ModelConfig& triton, ModelConfig* out) {
  if (triton.platform() != "ensemble") {
    return FieldError("ensemble_scheduling", "given without platform: \"ensemble\"");
  }
  const inference::ModelEnsembling& ensembling = triton.ensemble_scheduling();
  if (ensembling.step_size() == 0) {
    return FieldError("ensemble_scheduling.step", "an ensemble needs its steps");
  }
  std::vector<EnsembleStep> steps;
  for (int i = 0; i < ensembling.step_size(); ++i) {
    const auto& step = ensembling.step(i);
    const std::string at = "ensemble_scheduling.step[" + std::to_string(i) + "]";
    if (!step.model_namespace().empty()) {
      return NotHonoured(at + ".model_namespace", "model names are the repository's folders");
    }
    EnsembleStep mapped;
    mapped.model_name = step.model_name();
    mapped.model_version = step.model_version() < 0 ? "" : std::to_string(step.model_version());
    mapped.input_map.insert(step.input_map().begin(), step.input_map().end());
    mapped.output_map.insert(step.output_map().begin(), step.output_map().end());
    steps.push_back(std::move(mapped));
  }
  if (out->inputs.empty() || out->outputs.empty()) {
    return FieldError("input", "an ensemble gives its inputs and outputs");
  }
  out->ensemble = std::move(steps);
  return OkStatus();
}

StatusOr<WarmupInput> WarmupInputOf(const inference::ModelWarmup::Input& input,
                                    const std::string& at) {
  WarmupInput out;
  switch (input.input_data_type_case()) {
    case inference::ModelWarmup::Input::kZeroData:
      out.kind = WarmupInput::kZero;
      break;
    case inference::ModelWarmup::Input::kRandomData:
      out.kind = WarmupInput::kRandom;
      break;
    case inference::ModelWarmup::Input::kInputDataFile:
      out.kind = WarmupInput::kFile;
      out.file = input.input_data_file();
      if (out.file.find('/') != std::string::npos) {
        return FieldError(at + ".input_data_file", "must be a file name in the model's warmup/");
      }
      break;
    default:
      return FieldError(at, "needs one of zero_data, random_data and input_data_file");
  }
  out.dims.emplace(input.dims().begin(), input.dims().end());
  return out;
}

Status MapWarmup(const inference::ModelConfig& triton, ModelConfig* out) {
  for (int i = 0; i < triton.model_warmup_size(); ++i) {
    const inference::ModelWarmup& warmup = triton.model_warmup(i);
    const std::string at = "model_warmup[" + std::to_string(i) + "]";
    WarmupSample sample;
    sample.name = warmup.name().empty() ? "sample " + std::to_string(i) : warmup.name();
    sample.batch_size = std::max<int64_t>(1, warmup.batch_size());
    sample.count = static_cast<int>(std::clamp<uint32_t>(warmup.count(), 1, 1000));
    for (const auto& [name, input] : warmup.inputs()) {
      CHORUS_ASSIGN_OR_RETURN(sample.inputs[name], WarmupInputOf(input, at + ".inputs." + name));
    }
    out->warmup.push_back(std::move(sample));
  }
  return OkStatus();
}

}  // namespace

Status MapScheduling(const inference::ModelConfig& triton, ModelConfig* out) {
  out->dynamic_batching = false;  // Triton batches requests only when asked to
  switch (triton.scheduling_choice_case()) {
    case inference::ModelConfig::kDynamicBatching:
      return MapDynamicBatching(triton.dynamic_batching(), out);
    case inference::ModelConfig::kSequenceBatching:
      return MapSequenceBatching(triton.sequence_batching(), out);
    case inference::ModelConfig::kEnsembleScheduling:
      return MapEnsemble(triton, out);
    default:
      break;
  }
  if (triton.platform() == "ensemble") {
    return FieldError("ensemble_scheduling", "is required for platform \"ensemble\"");
  }
  return OkStatus();
}

Status MapServingFeatures(const inference::ModelConfig& triton, ModelConfig* out) {
  CHORUS_RETURN_IF_ERROR(MapWarmup(triton, out));
  out->response_cache = triton.response_cache().enable();
  out->decoupled = triton.model_transaction_policy().decoupled();
  return OkStatus();
}

}  // namespace chorus::triton_config
