// Triton's ModelConfig onto chorus' (triton_config.h): field by field, each
// either mapped onto what config.json would say, or refused naming it.
#include <algorithm>
#include <cstdlib>

#include "chorus/package/dtype.h"
#include "chorus/server/config/triton_config.h"
#include "server/config/src/triton_config_scheduling.h"

namespace chorus {
namespace triton_config {

Status FieldError(const std::string& field, const std::string& why) {
  return InvalidArgumentError("config.pbtxt: " + field + ": " + why);
}

Status NotHonoured(const std::string& field, const std::string& why) {
  return FieldError(field, "chorus cannot honour it (" + why + "; docs/triton.md)");
}

StatusOr<std::string> DtypeOf(inference::DataType type, const std::string& field) {
  if (type == inference::TYPE_INVALID) return FieldError(field, "a data_type is required");
  if (type == inference::TYPE_STRING) return std::string(InfoOf(Dtype::kString).name);
  const std::string name = inference::DataType_Name(type);
  if (const DtypeInfo* info = DtypeByWireName(std::string_view(name).substr(5))) {
    return std::string(info->name);
  }
  return FieldError(field, "data_type " + name + " is not one chorus carries");
}

}  // namespace triton_config

namespace {

using triton_config::DtypeOf;
using triton_config::FieldError;
using triton_config::NotHonoured;

Status CheckTensorFlags(bool shape_tensor, bool non_linear, const std::string& at) {
  if (shape_tensor) return NotHonoured(at + ".is_shape_tensor", "shape tensors are TensorRT's");
  if (non_linear) {
    return NotHonoured(at + ".is_non_linear_format_io", "non-linear layouts are TensorRT's");
  }
  return OkStatus();
}

InputFormat FormatOf(inference::ModelInput::Format format) {
  switch (format) {
    case inference::ModelInput::FORMAT_NCHW:
      return InputFormat::kNchw;
    case inference::ModelInput::FORMAT_NHWC:
      return InputFormat::kNhwc;
    default:
      return InputFormat::kNone;
  }
}

Status MapInput(const inference::ModelInput& input, const std::string& at, ModelConfig* out) {
  CHORUS_RETURN_IF_ERROR(
      CheckTensorFlags(input.is_shape_tensor(), input.is_non_linear_format_io(), at));
  if (input.allow_ragged_batch()) {
    return NotHonoured(at + ".allow_ragged_batch",
                       "chorus batches requests whose shapes agree but along the batch");
  }
  TensorSpec spec;
  spec.name = input.name();
  CHORUS_ASSIGN_OR_RETURN(spec.dtype, DtypeOf(input.data_type(), at + ".data_type"));
  spec.shape.assign(input.dims().begin(), input.dims().end());
  spec.optional = input.optional();
  TensorAnnotation& annotation = out->tensors[spec.name];
  if (input.format() != inference::ModelInput::FORMAT_NONE) {
    annotation.format = FormatOf(input.format());
  }
  if (input.has_reshape()) {
    annotation.reshape.emplace(input.reshape().shape().begin(), input.reshape().shape().end());
  }
  out->inputs.push_back(std::move(spec));
  return OkStatus();
}

Status MapOutput(const inference::ModelOutput& output, const std::string& at, ModelConfig* out) {
  CHORUS_RETURN_IF_ERROR(
      CheckTensorFlags(output.is_shape_tensor(), output.is_non_linear_format_io(), at));
  TensorSpec spec;
  spec.name = output.name();
  CHORUS_ASSIGN_OR_RETURN(spec.dtype, DtypeOf(output.data_type(), at + ".data_type"));
  spec.shape.assign(output.dims().begin(), output.dims().end());
  TensorAnnotation& annotation = out->tensors[spec.name];
  if (!output.label_filename().empty()) {
    if (output.label_filename().find('/') != std::string::npos) {
      return FieldError(at + ".label_filename", "must be a file name in the model's folder");
    }
    annotation.label_filename = output.label_filename();
  }
  if (output.has_reshape()) {
    annotation.reshape.emplace(output.reshape().shape().begin(), output.reshape().shape().end());
  }
  out->outputs.push_back(std::move(spec));
  return OkStatus();
}

// The index N of a name "<anything>__N" (Triton's PyTorch naming convention
// for positional tensors), or -1.
int64_t PositionalIndex(const std::string& name) {
  const size_t at = name.rfind("__");
  if (at == std::string::npos || at + 2 >= name.size()) return -1;
  const std::string digits = name.substr(at + 2);
  if (!std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::atoll(digits.c_str());
}

// TorchScript's tensors named by Triton's convention (INPUT__0, OUTPUT__1)
// take the positions their indices say; others keep the config's order.
void OrderByConvention(std::vector<TensorSpec>* tensors) {
  const bool conventional =
      !tensors->empty() && std::all_of(tensors->begin(), tensors->end(), [](const TensorSpec& t) {
        return PositionalIndex(t.name) >= 0;
      });
  if (!conventional) return;
  std::stable_sort(tensors->begin(), tensors->end(), [](const TensorSpec& a, const TensorSpec& b) {
    return PositionalIndex(a.name) < PositionalIndex(b.name);
  });
}

// backend / platform: which kind of model the folder holds.
Status MapKind(const inference::ModelConfig& triton, ModelConfig* out) {
  const std::string& backend = triton.backend();
  const std::string& platform = triton.platform();
  if (!triton.runtime().empty()) {
    return NotHonoured("runtime", "chorus runs each backend's own runtime");
  }
  if (platform == "ensemble") {
    if (!backend.empty()) return FieldError("backend", "an ensemble has no backend");
    return OkStatus();  // its steps: MapScheduling
  }
  if (backend == "python" && platform.empty()) {
    out->python_backend = true;
  } else if ((backend == "pytorch" && (platform.empty() || platform == "pytorch_libtorch")) ||
             (backend.empty() && platform == "pytorch_libtorch")) {
    out->format = ModelFormat::kTorchScript;
  } else if (backend == "chorus" || (backend.empty() && platform == "pytorch_torch_package")) {
    // chorus' own package or a stock torch.package archive: the file says which.
  } else if (backend.empty() && platform == "pytorch_torch_export") {
    out->format = ModelFormat::kTorchExport;
  } else if (backend.empty() && platform == "pytorch_aot_inductor") {
    out->format = ModelFormat::kAotInductor;
  } else if (!backend.empty() || !platform.empty()) {
    return FieldError(backend.empty() ? "platform" : "backend",
                      "\"" + (backend.empty() ? platform : backend) +
                          "\" is not served by chorus: it serves backend \"python\", "
                          "\"pytorch\" (TorchScript, platform \"pytorch_libtorch\"), platform "
                          "\"ensemble\" and backend \"chorus\" (chorus' own packages)");
  }
  return OkStatus();
}

Status MapTensors(const inference::ModelConfig& triton, ModelConfig* out) {
  if (triton.max_batch_size() < 0) return FieldError("max_batch_size", "must be 0 or more");
  out->max_batch_size = triton.max_batch_size();
  for (int i = 0; i < triton.input_size(); ++i) {
    CHORUS_RETURN_IF_ERROR(MapInput(triton.input(i), "input[" + std::to_string(i) + "]", out));
  }
  for (int i = 0; i < triton.output_size(); ++i) {
    CHORUS_RETURN_IF_ERROR(MapOutput(triton.output(i), "output[" + std::to_string(i) + "]", out));
  }
  if (out->format == ModelFormat::kTorchScript) {
    OrderByConvention(&out->inputs);
    OrderByConvention(&out->outputs);
  }
  return OkStatus();
}

Status MapInstanceGroup(const inference::ModelInstanceGroup& group, const std::string& at,
                        ModelConfig* out) {
  if (group.has_rate_limiter()) {
    return NotHonoured(at + ".rate_limiter", "chorus' interpreters are its only resource");
  }
  if (group.secondary_devices_size() > 0) {
    return NotHonoured(at + ".secondary_devices", "NVDLA devices are TensorRT's");
  }
  if (group.profile_size() > 0) return NotHonoured(at + ".profile", "profiles are TensorRT's");
  if (group.passive()) return NotHonoured(at + ".passive", "every instance takes requests");
  if (!group.host_policy().empty()) {
    return NotHonoured(at + ".host_policy", "chorus places threads itself");
  }
  InstanceGroup mapped;
  mapped.name = group.name();
  mapped.count = std::max(1, group.count());
  mapped.gpus.assign(group.gpus().begin(), group.gpus().end());
  switch (group.kind()) {
    case inference::ModelInstanceGroup::KIND_GPU:
      mapped.kind = InstanceGroup::Kind::kGpu;
      break;
    case inference::ModelInstanceGroup::KIND_MODEL:
      mapped.kind = InstanceGroup::Kind::kModel;
      break;
    case inference::ModelInstanceGroup::KIND_CPU:
      mapped.kind = InstanceGroup::Kind::kCpu;
      break;
    default:
      mapped.kind = InstanceGroup::Kind::kAuto;
      break;
  }
  if (mapped.kind == InstanceGroup::Kind::kGpu && mapped.gpus.empty()) {
    mapped.gpus.push_back(0);  // Triton: every GPU; chorus takes the first unless named
  }
  out->instance_groups.push_back(std::move(mapped));
  return OkStatus();
}

// Instance groups, and (for a model run from a file) the devices its GPU groups name.
Status MapInstances(const inference::ModelConfig& triton, ModelConfig* out) {
  for (int i = 0; i < triton.instance_group_size(); ++i) {
    CHORUS_RETURN_IF_ERROR(MapInstanceGroup(triton.instance_group(i),
                                            "instance_group[" + std::to_string(i) + "]", out));
  }
  bool cpu = false;
  for (const InstanceGroup& group : out->instance_groups) {
    if (group.kind != InstanceGroup::Kind::kGpu) {
      cpu = true;
      continue;
    }
    for (int gpu : group.gpus) out->devices.push_back("cuda:" + std::to_string(gpu));
  }
  if (cpu && !out->devices.empty() && !out->python_backend) {
    return NotHonoured("instance_group",
                       "a model's replicas run on the CPU or on GPUs, not on both at once");
  }
  return OkStatus();
}

Status MapVersionPolicy(const inference::ModelVersionPolicy& policy, ModelConfig* out) {
  if (policy.has_all()) {
    out->version_policy.kind = VersionPolicy::Kind::kAll;
  } else if (policy.has_specific()) {
    out->version_policy.kind = VersionPolicy::Kind::kSpecific;
    out->version_policy.versions.assign(policy.specific().versions().begin(),
                                        policy.specific().versions().end());
    if (out->version_policy.versions.empty()) {
      return FieldError("version_policy.specific.versions", "names no version");
    }
  } else {
    out->version_policy.kind = VersionPolicy::Kind::kLatest;
    out->version_policy.latest = std::max<int64_t>(1, policy.latest().num_versions());
  }
  return OkStatus();
}

Status MapParameters(const inference::ModelConfig& triton, ModelConfig* out) {
  for (const auto& [key, value] : triton.parameters()) {
    if (key == "EXECUTION_ENV_PATH") {
      return NotHonoured("parameters.EXECUTION_ENV_PATH",
                         "chorus' interpreters share the server's site-packages: install what "
                         "the environment holds there");
    }
    out->parameters[key] = value.string_value();
  }
  return OkStatus();
}

Status MapOptimization(const inference::ModelOptimizationPolicy& optimization) {
  // Pinned memory and the gather threshold only tune copies; the rest changes
  // how a model runs, which chorus does not do for it.
  if (optimization.has_graph()) return NotHonoured("optimization.graph", "graph rewrites");
  if (optimization.has_cuda()) return NotHonoured("optimization.cuda", "CUDA graphs");
  if (optimization.has_execution_accelerators()) {
    return NotHonoured("optimization.execution_accelerators", "accelerators are other backends'");
  }
  if (optimization.priority() != inference::ModelOptimizationPolicy::PRIORITY_DEFAULT) {
    return NotHonoured("optimization.priority", "every model's threads run at one priority");
  }
  if (optimization.eager_batching()) {
    return NotHonoured("optimization.eager_batching", "it is TensorRT's");
  }
  return OkStatus();
}

// Fields of other backends and of Triton's agents, which chorus has no
// counterpart for: refused when set.
Status CheckForeignFields(const inference::ModelConfig& triton) {
  if (triton.batch_input_size() > 0) return NotHonoured("batch_input", "ragged batches");
  if (triton.batch_output_size() > 0) return NotHonoured("batch_output", "ragged batches");
  if (!triton.cc_model_filenames().empty()) {
    return NotHonoured("cc_model_filenames", "one file serves every device");
  }
  if (!triton.metric_tags().empty()) return NotHonoured("metric_tags", "custom metric labels");
  if (triton.has_model_operations()) {
    return NotHonoured("model_operations", "custom op libraries load through Python imports");
  }
  if (triton.has_model_repository_agents()) {
    return NotHonoured("model_repository_agents", "repository agents are Triton's plugins");
  }
  return OkStatus();
}

}  // namespace

StatusOr<ModelConfig> ModelConfigFromTriton(const inference::ModelConfig& triton,
                                            const std::string& model_name) {
  if (!triton.name().empty() && triton.name() != model_name) {
    return FieldError("name", "unexpected directory name '" + model_name + "' for model '" +
                                  triton.name() + "', directory name must equal model name");
  }
  ModelConfig out;
  CHORUS_RETURN_IF_ERROR(MapKind(triton, &out));
  CHORUS_RETURN_IF_ERROR(CheckForeignFields(triton));
  CHORUS_RETURN_IF_ERROR(MapTensors(triton, &out));
  CHORUS_RETURN_IF_ERROR(MapInstances(triton, &out));
  CHORUS_RETURN_IF_ERROR(MapVersionPolicy(triton.version_policy(), &out));
  CHORUS_RETURN_IF_ERROR(MapParameters(triton, &out));
  CHORUS_RETURN_IF_ERROR(MapOptimization(triton.optimization()));
  CHORUS_RETURN_IF_ERROR(triton_config::MapScheduling(triton, &out));
  CHORUS_RETURN_IF_ERROR(triton_config::MapServingFeatures(triton, &out));
  if (!triton.default_model_filename().empty()) {
    if (triton.default_model_filename().find('/') != std::string::npos) {
      return FieldError("default_model_filename", "must be a file name, not a path");
    }
    out.default_model_filename = triton.default_model_filename();
  }
  // Annotations of no input or output are an empty entry per tensor: drop them.
  for (auto it = out.tensors.begin(); it != out.tensors.end();) {
    const TensorAnnotation& a = it->second;
    it = (!a.format && a.label_filename.empty() && !a.reshape) ? out.tensors.erase(it) : ++it;
  }
  out.triton = std::make_shared<const inference::ModelConfig>(triton);
  return out;
}

}  // namespace chorus
