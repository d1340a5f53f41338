#include "chorus/server/config/model_config.h"

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "chorus/common/file_util.h"
#include "chorus/package/dtype.h"
#include "chorus/package/format.h"
#include "chorus/server/config/triton_config.h"
#include "server/config/src/config_json.h"

namespace chorus {
namespace {

using config_json::CheckKeys;
using config_json::IntAt;
using config_json::Json;
using config_json::KeyError;
using config_json::ObjectsAt;
using config_json::StringAt;

// "FP32" (the protocol's), "TYPE_FP32" (Triton's config) or "float32" (torch's);
// strings: "BYTES", "TYPE_STRING" or "string".
StatusOr<std::string> DatatypeAt(const Json& value, const std::string& key) {
  CHORUS_ASSIGN_OR_RETURN(std::string name, StringAt(value, key));
  std::string_view wire = name;
  if (wire.rfind("TYPE_", 0) == 0) wire.remove_prefix(5);
  if (wire == "STRING") wire = InfoOf(Dtype::kString).wire;
  if (const DtypeInfo* info = DtypeByWireName(wire)) return std::string(info->name);
  if (const DtypeInfo* info = DtypeByName(name)) return std::string(info->name);
  return KeyError(key, "unknown datatype \"" + name + "\" (FP32, INT64, ... as in the protocol)");
}

StatusOr<std::vector<TensorSpec>> TensorsAt(const Json& list, const std::string& key) {
  if (!list.is_array() || list.empty()) return KeyError(key, "must be a non-empty list");
  std::vector<TensorSpec> tensors;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = key + "[" + std::to_string(i) + "]";
    const Json& tensor = list[i];
    if (!tensor.is_object()) return KeyError(at, "must be an object");
    CHORUS_RETURN_IF_ERROR(CheckKeys(tensor, at + ".", {"name", "datatype", "dims"}));
    TensorSpec spec;
    if (!tensor.contains("name")) return KeyError(at + ".name", "is required");
    CHORUS_ASSIGN_OR_RETURN(spec.name, StringAt(tensor["name"], at + ".name"));
    if (!tensor.contains("datatype")) return KeyError(at + ".datatype", "is required");
    CHORUS_ASSIGN_OR_RETURN(spec.dtype, DatatypeAt(tensor["datatype"], at + ".datatype"));
    if (!tensor.contains("dims") || !tensor["dims"].is_array()) {
      return KeyError(at + ".dims", "is required: a list of sizes (-1: any)");
    }
    for (size_t d = 0; d < tensor["dims"].size(); ++d) {
      CHORUS_ASSIGN_OR_RETURN(
          int64_t size, IntAt(tensor["dims"][d], at + ".dims[" + std::to_string(d) + "]", -1));
      spec.shape.push_back(size);
    }
    for (const TensorSpec& other : tensors) {
      if (other.name == spec.name) return KeyError(at + ".name", "\"" + spec.name + "\" twice");
    }
    tensors.push_back(std::move(spec));
  }
  return tensors;
}

StatusOr<InputFormat> InputFormatAt(const Json& value, const std::string& key) {
  CHORUS_ASSIGN_OR_RETURN(std::string name, StringAt(value, key));
  for (auto [text, format] :
       {std::pair{"FORMAT_NONE", InputFormat::kNone}, std::pair{"FORMAT_NCHW", InputFormat::kNchw},
        std::pair{"FORMAT_NHWC", InputFormat::kNhwc}}) {
    if (name == text) return format;
  }
  return KeyError(key, "unknown format \"" + name + "\" (FORMAT_NONE, FORMAT_NCHW, FORMAT_NHWC)");
}

// "tensors": {name: {"format": ..., "label_filename": ...}}.
StatusOr<std::map<std::string, TensorAnnotation>> TensorAnnotationsAt(const Json& value) {
  if (!value.is_object()) return KeyError("tensors", "must be an object: tensor name -> {...}");
  std::map<std::string, TensorAnnotation> annotations;
  for (const auto& [name, item] : value.items()) {
    const std::string at = "tensors." + name;
    if (!item.is_object()) return KeyError(at, "must be an object");
    CHORUS_RETURN_IF_ERROR(CheckKeys(item, at + ".", {"format", "label_filename"}));
    TensorAnnotation annotation;
    if (item.contains("format")) {
      CHORUS_ASSIGN_OR_RETURN(annotation.format, InputFormatAt(item["format"], at + ".format"));
    }
    if (item.contains("label_filename")) {
      CHORUS_ASSIGN_OR_RETURN(annotation.label_filename,
                              StringAt(item["label_filename"], at + ".label_filename"));
      if (annotation.label_filename.find('/') != std::string::npos) {
        return KeyError(at + ".label_filename", "must be a file name in the model's folder");
      }
    }
    annotations[name] = std::move(annotation);
  }
  return annotations;
}

StatusOr<SequenceControl> ControlKindAt(const Json& value, const std::string& key) {
  CHORUS_ASSIGN_OR_RETURN(std::string kind, StringAt(value, key));
  for (auto [text, control] :
       {std::pair{"CONTROL_SEQUENCE_START", SequenceControl::kStart},
        std::pair{"CONTROL_SEQUENCE_END", SequenceControl::kEnd},
        std::pair{"CONTROL_SEQUENCE_READY", SequenceControl::kReady},
        std::pair{"CONTROL_SEQUENCE_CORRID", SequenceControl::kCorrelationId}}) {
    if (kind == text) return control;
  }
  return KeyError(
      key, "unknown kind \"" + kind + "\" (CONTROL_SEQUENCE_START, _END, _READY or _CORRID)");
}

StatusOr<SequenceBatching> SequenceBatchingAt(const Json& value) {
  const std::string key = "sequence_batching";
  if (!value.is_object()) return KeyError(key, "must be an object");
  CHORUS_RETURN_IF_ERROR(CheckKeys(
      value, key + ".", {"strategy", "max_sequence_idle_microseconds", "control_inputs", "state"}));
  SequenceBatching sequences;
  if (value.contains("strategy")) {
    CHORUS_ASSIGN_OR_RETURN(std::string strategy, StringAt(value["strategy"], key + ".strategy"));
    if (strategy != "direct" && strategy != "oldest") {
      return KeyError(key + ".strategy", "must be \"direct\" or \"oldest\"");
    }
    sequences.strategy =
        strategy == "direct" ? SequenceStrategy::kDirect : SequenceStrategy::kOldest;
  }
  if (value.contains("max_sequence_idle_microseconds")) {
    CHORUS_ASSIGN_OR_RETURN(int64_t idle, IntAt(value["max_sequence_idle_microseconds"],
                                                key + ".max_sequence_idle_microseconds", 1));
    sequences.max_idle = std::chrono::microseconds(idle);
  }
  if (value.contains("control_inputs")) {
    CHORUS_ASSIGN_OR_RETURN(auto controls, ObjectsAt(value["control_inputs"],
                                                     key + ".control_inputs", {"name", "kind"}));
    for (size_t i = 0; i < controls.size(); ++i) {
      CHORUS_ASSIGN_OR_RETURN(
          SequenceControl kind,
          ControlKindAt(value["control_inputs"][i]["kind"],
                        key + ".control_inputs[" + std::to_string(i) + "].kind"));
      sequences.controls.emplace_back(controls[i][0], kind);
    }
  }
  if (value.contains("state")) {
    CHORUS_ASSIGN_OR_RETURN(
        auto states, ObjectsAt(value["state"], key + ".state", {"input_name", "output_name"}));
    for (auto& state : states) sequences.states.emplace_back(state[0], state[1]);
  }
  return sequences;
}

StatusOr<WarmupInput> WarmupInputAt(const Json& value, const std::string& key) {
  if (!value.is_object()) return KeyError(key, "must be an object");
  CHORUS_RETURN_IF_ERROR(
      CheckKeys(value, key + ".", {"zero_data", "random_data", "input_data_file", "dims"}));
  WarmupInput input;
  const int kinds = value.contains("zero_data") + value.contains("random_data") +
                    value.contains("input_data_file");
  if (kinds != 1) {
    return KeyError(key, "needs one of zero_data, random_data and input_data_file");
  }
  if (value.contains("random_data")) input.kind = WarmupInput::kRandom;
  if (value.contains("input_data_file")) {
    input.kind = WarmupInput::kFile;
    CHORUS_ASSIGN_OR_RETURN(input.file,
                            StringAt(value["input_data_file"], key + ".input_data_file"));
    if (input.file.find('/') != std::string::npos) {
      return KeyError(key + ".input_data_file", "must be a file name in the model's warmup/");
    }
  }
  if (value.contains("dims")) {
    if (!value["dims"].is_array()) return KeyError(key + ".dims", "must be a list of sizes");
    std::vector<int64_t> dims;
    for (size_t d = 0; d < value["dims"].size(); ++d) {
      CHORUS_ASSIGN_OR_RETURN(int64_t size,
                              IntAt(value["dims"][d], key + ".dims[" + std::to_string(d) + "]", 0));
      dims.push_back(size);
    }
    input.dims = std::move(dims);
  }
  return input;
}

StatusOr<std::vector<WarmupSample>> WarmupAt(const Json& list) {
  if (!list.is_array()) return KeyError("model_warmup", "must be a list");
  std::vector<WarmupSample> samples;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = "model_warmup[" + std::to_string(i) + "]";
    const Json& item = list[i];
    if (!item.is_object()) return KeyError(at, "must be an object");
    CHORUS_RETURN_IF_ERROR(CheckKeys(item, at + ".", {"name", "batch_size", "count", "inputs"}));
    WarmupSample sample;
    sample.name = "sample " + std::to_string(i);
    if (item.contains("name")) {
      CHORUS_ASSIGN_OR_RETURN(sample.name, StringAt(item["name"], at + ".name"));
    }
    if (item.contains("batch_size")) {
      CHORUS_ASSIGN_OR_RETURN(sample.batch_size, IntAt(item["batch_size"], at + ".batch_size", 1));
    }
    if (item.contains("count")) {
      CHORUS_ASSIGN_OR_RETURN(int64_t count, IntAt(item["count"], at + ".count", 1));
      sample.count = static_cast<int>(std::min<int64_t>(count, 1000));
    }
    if (item.contains("inputs")) {
      if (!item["inputs"].is_object()) return KeyError(at + ".inputs", "must be an object");
      for (const auto& [name, value] : item["inputs"].items()) {
        CHORUS_ASSIGN_OR_RETURN(sample.inputs[name], WarmupInputAt(value, at + ".inputs." + name));
      }
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

StatusOr<EntryPoint> EntryPointAt(const Json& value) {
  if (!value.is_object()) return KeyError("entry_point", "must be an object");
  CHORUS_RETURN_IF_ERROR(
      CheckKeys(value, "entry_point.", {"package", "resource", "module", "factory"}));
  EntryPoint entry;
  if (value.contains("package") || value.contains("resource")) {
    if (value.contains("module") || value.contains("factory")) {
      return KeyError("entry_point", "either package and resource, or module and factory");
    }
    entry.kind = package_format::kEntryPointPickle;
    CHORUS_ASSIGN_OR_RETURN(entry.package,
                            StringAt(value.value("package", Json()), "entry_point.package"));
    CHORUS_ASSIGN_OR_RETURN(entry.resource,
                            StringAt(value.value("resource", Json()), "entry_point.resource"));
  } else {
    entry.kind = package_format::kEntryPointFactory;
    CHORUS_ASSIGN_OR_RETURN(entry.module,
                            StringAt(value.value("module", Json()), "entry_point.module"));
    CHORUS_ASSIGN_OR_RETURN(entry.factory,
                            StringAt(value.value("factory", Json()), "entry_point.factory"));
  }
  return entry;
}

// "device": "cuda:0", or "devices": ["cuda:0", "cuda:1"] (one or the other).
StatusOr<std::vector<std::string>> DevicesAt(const Json& config) {
  if (config.contains("device") && config.contains("devices")) {
    return KeyError("devices", "given with device: give one or the other");
  }
  if (config.contains("device")) {
    CHORUS_ASSIGN_OR_RETURN(std::string device, StringAt(config["device"], "device"));
    return std::vector<std::string>{device};
  }
  std::vector<std::string> devices;
  if (!config.contains("devices")) return devices;
  const Json& list = config["devices"];
  if (!list.is_array() || list.empty()) return KeyError("devices", "must be a non-empty list");
  for (size_t i = 0; i < list.size(); ++i) {
    CHORUS_ASSIGN_OR_RETURN(std::string device,
                            StringAt(list[i], "devices[" + std::to_string(i) + "]"));
    devices.push_back(std::move(device));
  }
  return devices;
}

StatusOr<ModelFormat> FormatAt(const Json& value) {
  CHORUS_ASSIGN_OR_RETURN(std::string name, StringAt(value, "format"));
  if (std::optional<ModelFormat> format = FormatByConfigName(name)) return *format;
  return KeyError("format", "unknown format \"" + name + "\" (" + FormatConfigNames() + ")");
}

StatusOr<GenerationOptions> GenerationAt(const Json& generation) {
  if (!generation.is_object()) return KeyError("generation", "must be an object");
  CHORUS_RETURN_IF_ERROR(CheckKeys(generation, "generation.",
                                   {"cache_blocks", "block_size", "max_running", "max_step_tokens",
                                    "prefill_chunk", "engines", "prefix_caching"}));
  GenerationOptions options;
  options.engines = 0;  // one per interpreter unless given
  for (auto [key, field] : {std::pair{"cache_blocks", &options.cache_blocks},
                            std::pair{"block_size", &options.block_size},
                            std::pair{"max_running", &options.max_running},
                            std::pair{"max_step_tokens", &options.max_step_tokens},
                            std::pair{"prefill_chunk", &options.prefill_chunk},
                            std::pair{"engines", &options.engines}}) {
    if (!generation.contains(key)) continue;
    CHORUS_ASSIGN_OR_RETURN(int64_t value,
                            IntAt(generation[key], std::string("generation.") + key, 1));
    *field = static_cast<int>(std::min<int64_t>(value, 1 << 30));
  }
  if (generation.contains("prefix_caching")) {
    if (!generation["prefix_caching"].is_boolean()) {
      return KeyError("generation.prefix_caching", "must be true or false");
    }
    options.prefix_caching = generation["prefix_caching"].get<bool>();
  }
  return options;
}

StatusOr<QueuePolicy> QueuePolicyAt(const Json& value, const std::string& key) {
  if (!value.is_object()) return KeyError(key, "must be an object");
  CHORUS_RETURN_IF_ERROR(CheckKeys(value, key + ".",
                                   {"timeout_action", "default_timeout_microseconds",
                                    "allow_timeout_override", "max_queue_size"}));
  QueuePolicy policy;
  if (value.contains("timeout_action")) {
    CHORUS_ASSIGN_OR_RETURN(std::string action,
                            StringAt(value["timeout_action"], key + ".timeout_action"));
    if (action != "REJECT" && action != "DELAY") {
      return KeyError(key + ".timeout_action", "must be \"REJECT\" or \"DELAY\"");
    }
    policy.timeout_action = action == "REJECT" ? QueuePolicy::TimeoutAction::kReject
                                               : QueuePolicy::TimeoutAction::kDelay;
  }
  if (value.contains("default_timeout_microseconds")) {
    CHORUS_ASSIGN_OR_RETURN(int64_t us, IntAt(value["default_timeout_microseconds"],
                                              key + ".default_timeout_microseconds", 0));
    policy.default_timeout = std::chrono::microseconds(us);
  }
  if (value.contains("allow_timeout_override")) {
    if (!value["allow_timeout_override"].is_boolean()) {
      return KeyError(key + ".allow_timeout_override", "must be true or false");
    }
    policy.allow_timeout_override = value["allow_timeout_override"].get<bool>();
  }
  if (value.contains("max_queue_size")) {
    CHORUS_ASSIGN_OR_RETURN(int64_t size,
                            IntAt(value["max_queue_size"], key + ".max_queue_size", 0));
    policy.max_queue_size = static_cast<size_t>(size);
  }
  return policy;
}

Status ParsePriorities(const Json& config, PriorityOptions* out) {
  if (config.contains("priority_levels")) {
    CHORUS_ASSIGN_OR_RETURN(int64_t levels, IntAt(config["priority_levels"], "priority_levels", 1));
    out->levels = static_cast<int>(std::min<int64_t>(levels, 1 << 20));
    if (!config.contains("default_priority_level")) {
      return KeyError("default_priority_level", "is required with priority_levels");
    }
    CHORUS_ASSIGN_OR_RETURN(int64_t level,
                            IntAt(config["default_priority_level"], "default_priority_level", 1));
    if (level > out->levels) {
      return KeyError("default_priority_level", "must be within 1 and priority_levels");
    }
    out->default_level = static_cast<int>(level);
  } else if (config.contains("default_priority_level") ||
             config.contains("priority_queue_policy")) {
    return KeyError(config.contains("default_priority_level") ? "default_priority_level"
                                                              : "priority_queue_policy",
                    "needs priority_levels");
  }
  if (config.contains("queue_policy")) {
    CHORUS_ASSIGN_OR_RETURN(out->default_policy,
                            QueuePolicyAt(config["queue_policy"], "queue_policy"));
  }
  if (!config.contains("priority_queue_policy")) return OkStatus();
  const Json& policies = config["priority_queue_policy"];
  if (!policies.is_object()) return KeyError("priority_queue_policy", "must be an object");
  for (const auto& [name, value] : policies.items()) {
    const std::string key = "priority_queue_policy." + name;
    const int level = std::atoi(name.c_str());
    if (level < 1 || level > out->levels || std::to_string(level) != name) {
      return KeyError(key, "is not a priority level (1 to priority_levels)");
    }
    CHORUS_ASSIGN_OR_RETURN(out->policies[level], QueuePolicyAt(value, key));
  }
  return OkStatus();
}

Status ParseScheduling(const Json& config, ModelConfig* out) {
  CHORUS_RETURN_IF_ERROR(ParsePriorities(config, &out->priorities));
  if (config.contains("max_batch_size")) {
    CHORUS_ASSIGN_OR_RETURN(out->max_batch_size,
                            IntAt(config["max_batch_size"], "max_batch_size", 0));
  }
  if (config.contains("dynamic_batching")) {
    if (!config["dynamic_batching"].is_boolean()) {
      return KeyError("dynamic_batching", "must be true or false");
    }
    out->dynamic_batching = config["dynamic_batching"].get<bool>();
  }
  if (config.contains("max_queue_delay_us")) {
    CHORUS_ASSIGN_OR_RETURN(int64_t us,
                            IntAt(config["max_queue_delay_us"], "max_queue_delay_us", 0));
    out->max_queue_delay = std::chrono::microseconds(us);
  }
  if (config.contains("preferred_batch_sizes")) {
    const Json& sizes = config["preferred_batch_sizes"];
    if (!sizes.is_array()) return KeyError("preferred_batch_sizes", "must be a list");
    std::vector<int64_t> preferred;
    for (size_t i = 0; i < sizes.size(); ++i) {
      CHORUS_ASSIGN_OR_RETURN(
          int64_t size, IntAt(sizes[i], "preferred_batch_sizes[" + std::to_string(i) + "]", 1));
      preferred.push_back(size);
    }
    out->preferred_batch_sizes = std::move(preferred);
  }
  if (config.contains("decoupled")) {
    if (!config["decoupled"].is_boolean()) return KeyError("decoupled", "must be true or false");
    out->decoupled = config["decoupled"].get<bool>();
  }
  if (config.contains("generation")) {
    CHORUS_ASSIGN_OR_RETURN(out->generation, GenerationAt(config["generation"]));
    out->decoupled = true;
  }
  if (config.contains("max_queue")) {
    // 0: every request is refused (a model kept loaded but closed to traffic).
    CHORUS_ASSIGN_OR_RETURN(int64_t queue, IntAt(config["max_queue"], "max_queue", 0));
    out->max_queue = static_cast<size_t>(queue);
  }
  return OkStatus();
}

}  // namespace

namespace {

// Every key config.json may have.
const std::initializer_list<const char*> kConfigKeys = {"format",
                                                        "default_model_filename",
                                                        "entry_point",
                                                        "inputs",
                                                        "outputs",
                                                        "max_batch_size",
                                                        "dynamic_batching",
                                                        "max_queue_delay_us",
                                                        "preferred_batch_sizes",
                                                        "max_queue",
                                                        "decoupled",
                                                        "generation",
                                                        "device",
                                                        "devices",
                                                        "tensors",
                                                        "sequence_batching",
                                                        "response_cache",
                                                        "model_warmup",
                                                        "priority_levels",
                                                        "default_priority_level",
                                                        "queue_policy",
                                                        "priority_queue_policy",
                                                        "platform",
                                                        "ensemble_scheduling"};

// What to serve: the file, its entry point and signature.
Status ParseFile(const Json& config, ModelConfig* out) {
  if (config.contains("format")) {
    CHORUS_ASSIGN_OR_RETURN(out->format, FormatAt(config["format"]));
  }
  if (config.contains("default_model_filename")) {
    CHORUS_ASSIGN_OR_RETURN(out->default_model_filename,
                            StringAt(config["default_model_filename"], "default_model_filename"));
    if (out->default_model_filename.find('/') != std::string::npos) {
      return KeyError("default_model_filename", "must be a file name, not a path");
    }
  }
  if (config.contains("entry_point")) {
    CHORUS_ASSIGN_OR_RETURN(out->entry_point, EntryPointAt(config["entry_point"]));
  }
  if (config.contains("inputs")) {
    CHORUS_ASSIGN_OR_RETURN(out->inputs, TensorsAt(config["inputs"], "inputs"));
  }
  if (config.contains("outputs")) {
    if (!config.contains("inputs")) return KeyError("outputs", "given without inputs");
    CHORUS_ASSIGN_OR_RETURN(out->outputs, TensorsAt(config["outputs"], "outputs"));
  }
  return OkStatus();
}

// Triton's serving features: warm-up, response cache, sequences, tensor annotations.
Status ParseServingFeatures(const Json& config, ModelConfig* out) {
  if (config.contains("model_warmup")) {
    CHORUS_ASSIGN_OR_RETURN(out->warmup, WarmupAt(config["model_warmup"]));
  }
  if (config.contains("response_cache")) {
    const Json& cache = config["response_cache"];
    if (!cache.is_object()) return KeyError("response_cache", "must be an object");
    CHORUS_RETURN_IF_ERROR(CheckKeys(cache, "response_cache.", {"enable"}));
    if (!cache.contains("enable") || !cache["enable"].is_boolean()) {
      return KeyError("response_cache.enable", "must be true or false");
    }
    out->response_cache = cache["enable"].get<bool>();
  }
  if (config.contains("sequence_batching")) {
    CHORUS_ASSIGN_OR_RETURN(out->sequence_batching,
                            SequenceBatchingAt(config["sequence_batching"]));
  }
  if (config.contains("tensors")) {
    CHORUS_ASSIGN_OR_RETURN(out->tensors, TensorAnnotationsAt(config["tensors"]));
  }
  return OkStatus();
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(std::string_view json) {
  const Json config = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return InvalidArgumentError("config.json is not a JSON object");
  }
  CHORUS_RETURN_IF_ERROR(CheckKeys(config, "", kConfigKeys));
  ModelConfig out;
  CHORUS_RETURN_IF_ERROR(ParseFile(config, &out));
  CHORUS_RETURN_IF_ERROR(ParseServingFeatures(config, &out));
  CHORUS_RETURN_IF_ERROR(ParseScheduling(config, &out));
  CHORUS_ASSIGN_OR_RETURN(out.devices, DevicesAt(config));
  CHORUS_RETURN_IF_ERROR(ParseEnsembleConfig(config, &out));
  return out;
}

StatusOr<ModelConfig> ReadModelConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::error_code error;
  const bool pbtxt = std::filesystem::exists(model_dir + "/config.pbtxt", error);
  if (pbtxt && std::filesystem::exists(path, error)) {
    return InvalidArgumentError(model_dir +
                                " holds both config.json and config.pbtxt (Triton's): keep one");
  }
  if (pbtxt) return ReadTritonConfig(model_dir, model_dir.substr(model_dir.rfind('/') + 1));
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return ModelConfig{};
    return text.status();
  }
  StatusOr<ModelConfig> config = ParseModelConfig(*text);
  if (!config.ok())
    return Status(config.status().code(), model_dir + "/" + config.status().message());
  return config;
}

StatusOr<Manifest> SignatureManifest(const ModelConfig& config, const std::string& name,
                                     const std::string& version) {
  if (!config.has_signature()) {
    return FailedPreconditionError("config.json gives no signature (\"inputs\")");
  }
  Manifest manifest;
  manifest.model_name = name;
  manifest.model_version = version;
  const int64_t max_batch_size = config.max_batch_size.value_or(0);
  manifest.batching.batchable = max_batch_size > 0;
  manifest.batching.batch_dim = 0;
  manifest.batching.max_batch_size = max_batch_size;
  auto with_batch = [&](std::vector<TensorSpec> tensors) {
    for (TensorSpec& tensor : tensors) {
      if (max_batch_size > 0) tensor.shape.insert(tensor.shape.begin(), -1);
    }
    return tensors;
  };
  manifest.inputs = with_batch(config.inputs);
  manifest.outputs = with_batch(config.outputs);
  if (config.entry_point) manifest.entry_point = *config.entry_point;
  manifest.device = "cpu";
  return manifest;
}

}  // namespace chorus
