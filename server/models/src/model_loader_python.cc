// ModelLoader's Triton Python-backend models (model_loader.h): the config
// completed by the model's own auto_complete_config, the instances made
// (chorus/server/python_backend), warmed up, scheduled as any model.
#include <filesystem>

#include "chorus/server/config/triton_config.h"
#include "chorus/server/models/model_warmup.h"
#include "chorus/server/python_backend/python_backend_model.h"
#include "server/models/src/model_loader_internal.h"

namespace chorus {
namespace {

std::string PythonFileOf(const ModelConfig& config) {
  return config.default_model_filename.empty() ? "model.py" : config.default_model_filename;
}

bool Exists(const std::string& path) {
  std::error_code error;
  return std::filesystem::exists(path, error);
}

// The signature clients see: the config's tensors, with the batch dimension
// first when the model batches (Triton's dims leave it out).
Manifest PythonSignature(const ModelConfig& config, const std::string& name,
                         const std::string& version) {
  Manifest manifest;
  manifest.model_name = name;
  manifest.model_version = version;
  const int64_t max_batch_size = config.max_batch_size.value_or(0);
  manifest.batching = Batching{max_batch_size > 0, 0, max_batch_size};
  manifest.inputs = config.inputs;
  manifest.outputs = config.outputs;
  if (max_batch_size > 0) {
    for (auto* tensors : {&manifest.inputs, &manifest.outputs}) {
      for (TensorSpec& spec : *tensors) spec.shape.insert(spec.shape.begin(), -1);
    }
  }
  manifest.device = "cpu";
  return manifest;
}

// `triton` (normalized), completed by the model's auto_complete_config.
StatusOr<inference::ModelConfig> AutoCompleted(InterpreterManager* manager,
                                               const PythonBackendOptions& options,
                                               const inference::ModelConfig& triton) {
  CHORUS_ASSIGN_OR_RETURN(std::string completed, PythonBackendModel::AutoCompleteConfig(
                                                     manager, options, TritonConfigJson(triton)));
  StatusOr<inference::ModelConfig> config = TritonConfigFromJson(completed);
  if (!config.ok()) return config.status().Annotate("auto_complete_config's answer");
  if (config->backend().empty()) config->set_backend("python");
  NormalizeTritonConfig(options.model_name, &*config);
  return config;
}

}  // namespace

bool ModelLoader::IsPythonBackend(const ModelConfig& config, const std::string& name,
                                  const std::string& version) const {
  if (config.python_backend) return true;
  const bool names_kind =
      config.format || config.ensemble ||
      (config.triton && (!config.triton->backend().empty() || !config.triton->platform().empty()));
  const std::string model_dir = layout_->ModelDir(name);
  // As Triton: a folder that names no backend and holds model.py is a Python model.
  if (names_kind || (!config.triton && Exists(model_dir + "/config.json"))) return false;
  return Exists(model_dir + "/" + version + "/" + PythonFileOf(config));
}

StatusOr<std::shared_ptr<LoadedModel>> ModelLoader::LoadPythonBackend(const std::string& name,
                                                                      const std::string& version,
                                                                      ModelConfig config) const {
  std::error_code error;
  const std::string model_dir = std::filesystem::absolute(layout_->ModelDir(name), error).string();
  PythonBackendOptions options;
  options.model_name = name;
  options.version = version;
  options.model_dir = model_dir;
  options.file_name = PythonFileOf(config);
  options.load_timeout = options_.load_timeout;
  const std::string file = model_dir + "/" + version + "/" + options.file_name;
  if (!Exists(file)) {
    return NotFoundError("Python model file not found in '" + file + "'");
  }
  inference::ModelConfig triton = config.triton ? *config.triton : inference::ModelConfig();
  if (triton.backend().empty()) triton.set_backend("python");
  NormalizeTritonConfig(name, &triton);
  if (options_.auto_complete_config) {
    CHORUS_ASSIGN_OR_RETURN(triton, AutoCompleted(placement_->manager(), options, triton));
  }
  CHORUS_ASSIGN_OR_RETURN(config, ModelConfigFromTriton(triton, name));
  options.config = config.triton;
  options.signature = PythonSignature(config, name, version);
  options.decoupled = config.decoupled;
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<PythonBackendModel> python,
                          PythonBackendModel::Load(placement_, options));
  if (!config.warmup.empty()) {
    Status warm =
        WarmUp(*python, options.signature, config.warmup, model_dir, options_.probe_timeout);
    if (!warm.ok()) return Status(warm.code(), "config.pbtxt: " + warm.message());
  }
  CHORUS_ASSIGN_OR_RETURN(TensorAnnotations annotations,
                          model_loader::ResolveAnnotations(config, options.signature, model_dir));
  SchedulerOptions scheduling = model_loader::SchedulingFor(config, options.signature, options_);
  // A Python-backend model batches requests of streams too: it gets them unjoined.
  const Batching& batching = options.signature.batching;
  scheduling.batching.enabled =
      batching.batchable && batching.max_batch_size > 1 && config.dynamic_batching.value_or(false);
  scheduling.label = CrashLabel::Model(name, version);
  LoadedModelParts parts;
  parts.annotations = std::move(annotations);
  parts.response_cache = config.response_cache && !config.decoupled;
  parts.triton_config = config.triton;
  // Triton names a backend's models after it.
  return std::make_shared<LoadedModel>(name, version, std::move(python), "python",
                                       std::move(options.signature), scheduling, std::move(parts));
}

}  // namespace chorus
