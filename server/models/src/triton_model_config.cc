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

}  // namespace

void FillTritonModelConfig(const LoadedModel& model, inference::ModelConfig* config) {
  const Manifest& manifest = model.manifest();
  const SchedulerOptions& scheduling = model.scheduling();
  config->set_name(model.name());
  config->set_platform(FormatInfo(model.model().format()).platform);
  config->set_backend("chorus");
  config->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  const std::string& path = model.model().archive()->path();
  config->set_default_model_filename(path.substr(path.rfind('/') + 1));
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
  if (scheduling.batching.enabled) {
    auto* dynamic = config->mutable_dynamic_batching();
    for (int64_t size : scheduling.batching.preferred_batch_sizes) {
      dynamic->add_preferred_batch_size(static_cast<int32_t>(size));
    }
    dynamic->set_max_queue_delay_microseconds(scheduling.batching.max_queue_delay.count());
    dynamic->mutable_default_queue_policy()->set_max_queue_size(
        static_cast<uint32_t>(scheduling.max_queue));
  }
  auto* instances = config->add_instance_group();
  instances->set_name(model.name());
  instances->set_count(scheduling.workers);
  instances->set_kind(manifest.device == "cuda" ? inference::ModelInstanceGroup::KIND_GPU
                                                : inference::ModelInstanceGroup::KIND_CPU);
  config->mutable_model_transaction_policy()->set_decoupled(model.scheduling().decoupled);
}

}  // namespace chorus
