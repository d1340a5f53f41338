// config.json's ensemble keys (Triton's "platform": "ensemble" and
// "ensemble_scheduling"). Which tensors exist is checked when the ensemble
// loads, against its steps' models (ensemble.h).
#include <string>

#include "chorus/server/config/model_config.h"
#include "server/config/src/config_json.h"

namespace chorus {
namespace {

using config_json::CheckKeys;
using config_json::IntAt;
using config_json::Json;
using config_json::KeyError;
using config_json::StringAt;

// {"model input or output": "ensemble tensor", ...}
StatusOr<std::map<std::string, std::string>> TensorMapAt(const Json& value,
                                                         const std::string& key) {
  if (!value.is_object() || value.empty()) {
    return KeyError(key, "must be a non-empty object: the model's tensor -> the ensemble's");
  }
  std::map<std::string, std::string> map;
  for (const auto& [name, tensor] : value.items()) {
    CHORUS_ASSIGN_OR_RETURN(map[name], StringAt(tensor, key + "." + name));
  }
  return map;
}

// "model_version": -1 (Triton's: the version serving), a number, or "".
StatusOr<std::string> StepVersionAt(const Json& value, const std::string& key) {
  if (value.is_string()) {
    const std::string version = value.get<std::string>();
    if (version.find_first_not_of("0123456789") != std::string::npos) {
      return KeyError(key, "must be a version number, or -1 for the one serving");
    }
    return version;
  }
  CHORUS_ASSIGN_OR_RETURN(int64_t version, IntAt(value, key, -1));
  return version < 0 ? std::string() : std::to_string(version);
}

StatusOr<EnsembleStep> StepAt(const Json& value, const std::string& at) {
  if (!value.is_object()) return KeyError(at, "must be an object");
  CHORUS_RETURN_IF_ERROR(
      CheckKeys(value, at + ".", {"model_name", "model_version", "input_map", "output_map"}));
  EnsembleStep step;
  for (const char* required : {"model_name", "input_map", "output_map"}) {
    if (!value.contains(required)) return KeyError(at + "." + required, "is required");
  }
  CHORUS_ASSIGN_OR_RETURN(step.model_name, StringAt(value["model_name"], at + ".model_name"));
  if (value.contains("model_version")) {
    CHORUS_ASSIGN_OR_RETURN(step.model_version,
                            StepVersionAt(value["model_version"], at + ".model_version"));
  }
  CHORUS_ASSIGN_OR_RETURN(step.input_map, TensorMapAt(value["input_map"], at + ".input_map"));
  CHORUS_ASSIGN_OR_RETURN(step.output_map, TensorMapAt(value["output_map"], at + ".output_map"));
  return step;
}

// What an ensemble, which has no file of its own and schedules nothing
// itself, cannot be given.
Status CheckEnsembleKeys(const Json& config) {
  for (const char* key :
       {"format", "default_model_filename", "entry_point", "decoupled", "generation", "device",
        "devices", "sequence_batching", "model_warmup", "response_cache", "dynamic_batching",
        "max_queue_delay_us", "preferred_batch_sizes", "priority_levels", "queue_policy"}) {
    if (config.contains(key)) {
      return KeyError(key, "not for an ensemble (its steps' models say how they run)");
    }
  }
  if (!config.contains("inputs") || !config.contains("outputs")) {
    return KeyError("inputs", "an ensemble gives its inputs and outputs");
  }
  return OkStatus();
}

}  // namespace

Status ParseEnsembleConfig(const Json& config, ModelConfig* out) {
  if (config.contains("platform")) {
    CHORUS_ASSIGN_OR_RETURN(std::string platform, StringAt(config["platform"], "platform"));
    if (platform != "ensemble") {
      return KeyError("platform", "only \"ensemble\" (a model's file format is \"format\")");
    }
    if (!config.contains("ensemble_scheduling")) {
      return KeyError("ensemble_scheduling", "is required for platform \"ensemble\"");
    }
  }
  if (!config.contains("ensemble_scheduling")) return OkStatus();
  if (!config.contains("platform")) {
    return KeyError("ensemble_scheduling", "given without \"platform\": \"ensemble\"");
  }
  CHORUS_RETURN_IF_ERROR(CheckEnsembleKeys(config));
  const Json& scheduling = config["ensemble_scheduling"];
  if (!scheduling.is_object()) return KeyError("ensemble_scheduling", "must be an object");
  CHORUS_RETURN_IF_ERROR(CheckKeys(scheduling, "ensemble_scheduling.", {"step"}));
  if (!scheduling.contains("step") || !scheduling["step"].is_array() ||
      scheduling["step"].empty()) {
    return KeyError("ensemble_scheduling.step", "must be a non-empty list");
  }
  std::vector<EnsembleStep> steps;
  for (size_t i = 0; i < scheduling["step"].size(); ++i) {
    CHORUS_ASSIGN_OR_RETURN(
        EnsembleStep step,
        StepAt(scheduling["step"][i], "ensemble_scheduling.step[" + std::to_string(i) + "]"));
    steps.push_back(std::move(step));
  }
  out->ensemble = std::move(steps);
  return OkStatus();
}

}  // namespace chorus
