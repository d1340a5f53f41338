#include "chorus/server/models/triton_model_config.h"

#include <string>

#include "chorus/package/dtype.h"

namespace chorus {
namespace {

inference::DataType TritonDataType(const std::string& dtype) {
  const DtypeInfo* info = DtypeByName(dtype);
  if (info == nullptr) return inference::TYPE_INVALID;
  if (info->dtype == Dtype::kString) return inference::TYPE_STRING;  // BYTES' name in configs
  inference::DataType value = inference::TYPE_INVALID;
  inference::DataType_Parse(std::string("TYPE_") + info->wire, &value);
  return value;
}

template <typename Tensor>
void FillTensor(const TensorSpec& spec, bool drop_batch_dim, Tensor* out) {
  out->set_name(spec.name);
  out->set_data_type(TritonDataType(spec.dtype));
  for (size_t d = drop_batch_dim ? 1 : 0; d < spec.shape.size(); ++d) out->add_dims(spec.shape[d]);
}

inference::ModelInput::Format TritonFormat(InputFormat format) {
  switch (format) {
    case InputFormat::kNchw:
      return inference::ModelInput::FORMAT_NCHW;
    case InputFormat::kNhwc:
      return inference::ModelInput::FORMAT_NHWC;
    case InputFormat::kNone:
      break;
  }
  return inference::ModelInput::FORMAT_NONE;
}

void FillQueuePolicy(const QueuePolicy& policy, size_t max_queue,
                     inference::ModelQueuePolicy* out) {
  out->set_timeout_action(policy.timeout_action == QueuePolicy::TimeoutAction::kDelay
                              ? inference::ModelQueuePolicy::DELAY
                              : inference::ModelQueuePolicy::REJECT);
  out->set_default_timeout_microseconds(policy.default_timeout.count());
  out->set_allow_timeout_override(policy.allow_timeout_override);
  out->set_max_queue_size(
      static_cast<uint32_t>(policy.max_queue_size > 0 ? policy.max_queue_size : max_queue));
}

void FillDynamicBatching(const SchedulerOptions& scheduling, inference::ModelDynamicBatching* out) {
  for (int64_t size : scheduling.batching.preferred_batch_sizes) {
    out->add_preferred_batch_size(static_cast<int32_t>(size));
  }
  out->set_max_queue_delay_microseconds(scheduling.batching.max_queue_delay.count());
  const PriorityOptions& priorities = scheduling.priorities;
  FillQueuePolicy(priorities.default_policy, scheduling.max_queue,
                  out->mutable_default_queue_policy());
  out->set_priority_levels(priorities.levels);
  out->set_default_priority_level(priorities.default_level);
  for (const auto& [level, policy] : priorities.policies) {
    FillQueuePolicy(policy, scheduling.max_queue, &(*out->mutable_priority_queue_policy())[level]);
  }
}

// A stateful model's sequence batching: its controls (with the values chorus
// gives them, by the input's dtype) and states, from the model's own signature.
void FillSequenceBatching(const SequenceBatching& sequences, const Manifest& model, bool batches,
                          const SchedulerOptions& scheduling,
                          inference::ModelSequenceBatching* out) {
  using Control = inference::ModelSequenceBatching::Control;
  out->set_max_sequence_idle_microseconds(sequences.max_idle.count());
  const uint64_t delay = scheduling.batching.max_queue_delay.count();
  if (sequences.strategy == SequenceStrategy::kDirect) {
    out->mutable_direct()->set_max_queue_delay_microseconds(delay);
  } else {
    out->mutable_oldest()->set_max_queue_delay_microseconds(delay);
  }
  auto spec_of = [&model](const std::string& name) {
    for (const TensorSpec& spec : model.inputs) {
      if (spec.name == name) return spec;
    }
    return TensorSpec{};
  };
  for (const auto& [name, kind] : sequences.controls) {
    auto* input = out->add_control_input();
    input->set_name(name);
    Control* control = input->add_control();
    const TensorSpec spec = spec_of(name);
    switch (kind) {
      case SequenceControl::kStart:
        control->set_kind(Control::CONTROL_SEQUENCE_START);
        break;
      case SequenceControl::kEnd:
        control->set_kind(Control::CONTROL_SEQUENCE_END);
        break;
      case SequenceControl::kReady:
        control->set_kind(Control::CONTROL_SEQUENCE_READY);
        break;
      case SequenceControl::kCorrelationId:
        control->set_kind(Control::CONTROL_SEQUENCE_CORRID);
        control->set_data_type(TritonDataType(spec.dtype));
        continue;
    }
    if (spec.dtype == "bool") {
      control->add_bool_false_true(false);
      control->add_bool_false_true(true);
    } else if (spec.dtype.rfind("float", 0) == 0 || spec.dtype == "bfloat16") {
      control->add_fp32_false_true(0);
      control->add_fp32_false_true(1);
    } else {
      control->add_int32_false_true(0);
      control->add_int32_false_true(1);
    }
  }
  for (const auto& [input_name, output_name] : sequences.states) {
    auto* state = out->add_state();
    state->set_input_name(input_name);
    state->set_output_name(output_name);
    const TensorSpec spec = spec_of(input_name);
    state->set_data_type(TritonDataType(spec.dtype));
    for (size_t d = batches && !spec.shape.empty() ? 1 : 0; d < spec.shape.size(); ++d) {
      state->add_dims(spec.shape[d]);
    }
  }
}

void FillEnsembleScheduling(const Ensemble& ensemble, inference::ModelEnsembling* out) {
  for (const EnsembleStep& plan : ensemble.steps()) {
    auto* step = out->add_step();
    step->set_model_name(plan.model_name);
    step->set_model_version(plan.model_version.empty() ? -1 : std::stoll(plan.model_version));
    step->mutable_input_map()->insert(plan.input_map.begin(), plan.input_map.end());
    step->mutable_output_map()->insert(plan.output_map.begin(), plan.output_map.end());
  }
}

}  // namespace

void FillTritonModelConfig(const LoadedModel& model, inference::ModelConfig* config) {
  const Manifest& manifest = model.manifest();
  const SchedulerOptions& scheduling = model.scheduling();
  config->set_name(model.name());
  config->set_platform(model.platform());
  config->set_backend(model.ensemble() ? "" : "chorus");
  config->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  if (const Model* file = model.model()) {
    const std::string& path = file->archive()->path();
    config->set_default_model_filename(path.substr(path.rfind('/') + 1));
  }
  // Triton can only say "batches along dimension 0"; other batch dims are
  // announced as whole shapes.
  const bool batches = manifest.batching.batchable && manifest.batching.batch_dim == 0;
  config->set_max_batch_size(batches ? static_cast<int32_t>(scheduling.batching.max_batch_size)
                                     : 0);
  const TensorAnnotations& annotations = model.annotations();
  for (const TensorSpec& spec : manifest.inputs) {
    auto* input = config->add_input();
    FillTensor(spec, batches && !spec.shape.empty(), input);
    auto format = annotations.input_formats.find(spec.name);
    if (format != annotations.input_formats.end()) input->set_format(TritonFormat(format->second));
  }
  for (const TensorSpec& spec : manifest.outputs) {
    auto* output = config->add_output();
    FillTensor(spec, batches && !spec.shape.empty(), output);
    auto labels = annotations.output_labels.find(spec.name);
    if (labels != annotations.output_labels.end()) {
      output->set_label_filename(labels->second.filename);
    }
  }
  if (const SequenceBatcher* sequences = model.sequences()) {
    FillSequenceBatching(sequences->config(), *model.model()->manifest(), batches, scheduling,
                         config->mutable_sequence_batching());
  } else if (model.ensemble()) {
    FillEnsembleScheduling(*model.ensemble(), config->mutable_ensemble_scheduling());
  } else if (scheduling.batching.enabled || scheduling.priorities.levels > 0) {
    FillDynamicBatching(scheduling, config->mutable_dynamic_batching());
  }
  config->mutable_response_cache()->set_enable(model.response_cache());
  auto* instances = config->add_instance_group();
  instances->set_name(model.name());
  instances->set_count(scheduling.workers);
  instances->set_kind(manifest.device == "cuda" ? inference::ModelInstanceGroup::KIND_GPU
                                                : inference::ModelInstanceGroup::KIND_CPU);
  config->mutable_model_transaction_policy()->set_decoupled(model.scheduling().decoupled);
}

}  // namespace chorus
