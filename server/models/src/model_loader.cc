#include "chorus/server/models/model_loader.h"

#include <algorithm>

#include "chorus/package/archive.h"
#include "chorus/package/dtype.h"
#include "chorus/package/torch_dtype.h"
#include "chorus/server/models/model_warmup.h"
#include "chorus/serving/model_values.h"
#include "server/models/src/model_loader_internal.h"

namespace chorus {
namespace model_loader {

SchedulerOptions SchedulingFor(const ModelConfig& config, const Manifest& manifest,
                               const ModelLoaderOptions& options) {
  SchedulerOptions scheduling;
  scheduling.max_queue = config.max_queue.value_or(options.max_queue);
  // Triton's instances run a model at once: its concurrent executions.
  scheduling.workers = config.instance_count() > 0 ? config.instance_count() : options.workers;
  const Batching& hint = manifest.batching;
  scheduling.batching.enabled =
      hint.batchable && hint.max_batch_size > 1 && config.dynamic_batching.value_or(true);
  scheduling.batching.batch_dim = hint.batch_dim;
  scheduling.batching.max_batch_size =
      std::max<int64_t>(1, config.max_batch_size.value_or(hint.max_batch_size));
  if (config.max_queue_delay) scheduling.batching.max_queue_delay = *config.max_queue_delay;
  scheduling.decoupled = config.decoupled;
  scheduling.priorities = config.priorities;
  if (config.decoupled) scheduling.batching.enabled = false;  // a stream runs alone
  if (config.preferred_batch_sizes) {
    scheduling.batching.preferred_batch_sizes = *config.preferred_batch_sizes;
  }
  return scheduling;
}

bool HasTensor(const std::vector<TensorSpec>& tensors, const std::string& name) {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&](const TensorSpec& spec) { return spec.name == name; });
}

StatusOr<TensorAnnotations> ResolveAnnotations(const ModelConfig& config, const Manifest& manifest,
                                               const std::string& model_dir) {
  TensorAnnotations resolved;
  for (const auto& [name, annotation] : config.tensors) {
    const std::string at = "config.json: tensors." + name;
    const bool input = HasTensor(manifest.inputs, name);
    if (!input && !HasTensor(manifest.outputs, name)) {
      return InvalidArgumentError(at + ": the model has no input or output named \"" + name + "\"");
    }
    if (annotation.format) {
      if (!input) return InvalidArgumentError(at + ".format: \"" + name + "\" is an output");
      resolved.input_formats[name] = *annotation.format;
    }
    if (!annotation.label_filename.empty()) {
      if (input) return InvalidArgumentError(at + ".label_filename: \"" + name + "\" is an input");
      StatusOr<std::vector<std::string>> labels =
          ReadLabels(model_dir + "/" + annotation.label_filename);
      if (!labels.ok()) {
        return InvalidArgumentError(at + ".label_filename: cannot read " +
                                    annotation.label_filename + " in the model's folder");
      }
      resolved.output_labels[name] = {annotation.label_filename, std::move(*labels)};
    }
    if (annotation.reshape)
      (input ? resolved.input_reshapes : resolved.output_reshapes)[name] = *annotation.reshape;
  }
  return resolved;
}

}  // namespace model_loader

namespace {

using model_loader::ResolveAnnotations;
using model_loader::SchedulingFor;

// Zeros (empty strings for string inputs) for every input of `manifest`,
// any-size dimensions made 1.
std::vector<c10::IValue> ZeroInputs(const Manifest& manifest) {
  std::vector<c10::IValue> inputs;
  for (const TensorSpec& spec : manifest.inputs) {
    inputs.push_back(FilledValue(spec.dtype, WithAnySizeAsOne(spec.shape)));
  }
  return inputs;
}

// The manifest name of `value`'s dtype; FAILED_PRECONDITION (naming output
// `index`) for one the protocol cannot carry.
StatusOr<std::string> OutputDtype(const c10::IValue& value, size_t index) {
  if (!value.isTensor()) return std::string(InfoOf(Dtype::kString).name);
  std::optional<Dtype> dtype = DtypeOf(value.toTensor().scalar_type());
  if (!dtype) {
    return FailedPreconditionError("output " + std::to_string(index) + " has a dtype (" +
                                   std::string(c10::toString(value.toTensor().scalar_type())) +
                                   ") the protocol cannot carry");
  }
  return std::string(InfoOf(*dtype).name);
}

// What one run of `model` on zeros answers, interrupted after `timeout` (model
// code may never end on zeros). A decoupled model's first response stands for all.
StatusOr<c10::IValue> RunOnZeros(Model& model, const Manifest& signature, bool decoupled,
                                 std::chrono::milliseconds timeout) {
  CallOptions call;
  call.deadline = std::chrono::steady_clock::now() + timeout;
  if (!decoupled) return model.Forward(ZeroInputs(signature), call);
  StatusOr<c10::IValue> result = InternalError("the model yielded nothing on zeros");
  Status called = model.ForwardEach(ZeroInputs(signature), call, [&](const c10::IValue& value) {
    result = value;
    return false;
  });
  if (!called.ok()) return called;
  return result;
}

// The outputs' signature, from one run on zeros: their dtypes and shapes (the
// batch dimension, if batched, any-size), named output0, ...
StatusOr<std::vector<TensorSpec>> ProbeOutputs(Model& model, const Manifest& signature,
                                               bool decoupled, std::chrono::milliseconds timeout) {
  StatusOr<c10::IValue> result = RunOnZeros(model, signature, decoupled, timeout);
  if (!result.ok()) {
    return result.status().Annotate(
        "running the model on zeros to learn its outputs (give \"outputs\" in config.json "
        "instead)");
  }
  CHORUS_ASSIGN_OR_RETURN(std::vector<c10::IValue> values, FlattenOutputs(*result, nullptr));
  std::vector<TensorSpec> outputs;
  for (size_t i = 0; i < values.size(); ++i) {
    TensorSpec spec;
    spec.name = values.size() == 1 ? "output" : "output" + std::to_string(i);
    CHORUS_ASSIGN_OR_RETURN(spec.dtype, OutputDtype(values[i], i));
    spec.shape = ShapeOf(values[i]);
    if (signature.batching.batchable && !spec.shape.empty()) spec.shape[0] = -1;
    outputs.push_back(std::move(spec));
  }
  return outputs;
}

// FAILED_PRECONDITION for a file without a signature whose config does not
// say how to serve it, with the config to write.
Status NeedsConfigError(const std::string& path, const std::string& model_dir, ModelFormat format) {
  const bool package = format == ModelFormat::kTorchPackage;
  const std::string what = FormatInfo(format).description;
  const std::string entry_point =
      package ? "\"entry_point\": {\"package\": \"model\", \"resource\": \"model.pkl\"}, " : "";
  return FailedPreconditionError(
      path + (what.front() == 'A' ? " is an " : " is a ") + what +
      (package ? " without a chorus manifest: give its entry point and signature in "
               : " that carries no signature: give it in ") +
      model_dir + "/config.json, e.g. {" + entry_point +
      "\"max_batch_size\": 8, \"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\", "
      "\"dims\": [3, 224, 224]}]} (docs/server.md, \"Model configuration\")");
}

// Whether `path` is an AOTInductor package (opened again only on this error
// path; other formats fail FAILED_PRECONDITION for other reasons, e.g. a GPU
// the host lacks).
bool IsAotInductor(const std::string& path) {
  StatusOr<std::shared_ptr<Archive>> archive = Archive::Open(path);
  return archive.ok() && (*archive)->format() == ModelFormat::kAotInductor;
}

Status CheckFormat(std::optional<ModelFormat> expected, const Model& model,
                   const std::string& path) {
  if (!expected || *expected == model.format()) return OkStatus();
  return InvalidArgumentError("config.json: format: " + path + " is of format " +
                              FormatInfo(model.format()).config_name + ", not what format says");
}

// A file that carries its own signature takes none from config.json.
Status CheckNoSecondSignature(const Model& model, const ModelConfig& config,
                              const std::string& path) {
  if (!config.has_signature() && !config.entry_point) return OkStatus();
  return InvalidArgumentError(
      "config.json: " + std::string(config.entry_point ? "entry_point" : "inputs") + ": " + path +
      " (format " + FormatInfo(model.format()).config_name +
      ") carries its own entry point and signature");
}

// A stateful model's config: sequence batching of a model that answers once
// per request, whose control and state tensors it has.
Status CheckStateful(const ModelConfig& config, const Model& model) {
  if (config.decoupled || config.generation) {
    return InvalidArgumentError(
        "config.json: sequence_batching: a decoupled or generative model cannot be stateful");
  }
  Status signature =
      SequenceBatcher::ClientSignature(*model.manifest(), *config.sequence_batching).status();
  if (!signature.ok()) return InvalidArgumentError("config.json: " + signature.message());
  return OkStatus();
}

}  // namespace

StatusOr<std::shared_ptr<LoadedModel>> ModelLoader::LoadEnsemble(const std::string& name,
                                                                 const std::string& version,
                                                                 const ModelConfig& config) const {
  CHORUS_ASSIGN_OR_RETURN(Manifest signature, SignatureManifest(config, name, version));
  // Its outputs' labels (label_filename), reshapes and formats, as any
  // model's: a label file that cannot be read fails the load.
  CHORUS_ASSIGN_OR_RETURN(TensorAnnotations annotations,
                          ResolveAnnotations(config, signature, layout_->ModelDir(name)));
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<const Ensemble> ensemble,
                          Ensemble::Plan(name, signature, *config.ensemble, find_));
  SchedulerOptions scheduling = SchedulingFor(config, signature, options_);
  scheduling.label = CrashLabel::Model(name, version);
  return std::make_shared<LoadedModel>(name, version, std::move(ensemble), std::move(signature),
                                       scheduling, config.triton, std::move(annotations));
}

StatusOr<std::shared_ptr<LoadedModel>> ModelLoader::Load(const std::string& name,
                                                         const std::string& version,
                                                         ModelConfig config) const {
  if (config.ensemble) return LoadEnsemble(name, version, config);
  // An archive's manifest decides: its model.py is the eager model's, not Triton's.
  if (IsTorchServe(config, name, version)) return LoadTorchServe(name, version, config);
  if (IsPythonBackend(config, name, version)) {
    return LoadPythonBackend(name, version, std::move(config));
  }
  CHORUS_ASSIGN_OR_RETURN(std::string path,
                          layout_->ModelFile(name, version, config.default_model_filename));
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Model> model, LoadModel(path, config, name, version));
  if (!config.warmup.empty()) {
    Status warm = WarmUp(*model, *model->manifest(), config.warmup, layout_->ModelDir(name),
                         placement_->manager()->size());
    if (!warm.ok()) return Status(warm.code(), "config.json: " + warm.message());
  }
  CHORUS_ASSIGN_OR_RETURN(TensorAnnotations annotations,
                          ResolveAnnotations(config, *model->manifest(), layout_->ModelDir(name)));
  if (config.sequence_batching) CHORUS_RETURN_IF_ERROR(CheckStateful(config, *model));
  if (config.response_cache &&
      (config.decoupled || config.generation || config.sequence_batching)) {
    return InvalidArgumentError(
        "config.json: response_cache: only a model that answers each request once, alone, "
        "can be cached (not a decoupled, generative or stateful one)");
  }
  SchedulerOptions scheduling = SchedulingFor(config, *model->manifest(), options_);
  scheduling.label = CrashLabel::Model(name, version);
  std::unique_ptr<GenerationEngines> generation;
  if (config.generation) {
    GenerationOptions engines = *config.generation;
    engines.label = scheduling.label;
    CHORUS_ASSIGN_OR_RETURN(generation, GenerationEngines::Start(model, placement_, engines));
  }
  LoadedModelParts parts{std::move(generation), std::move(annotations), config.sequence_batching,
                         config.response_cache, config.triton};
  return std::make_shared<LoadedModel>(name, version, std::move(model), scheduling,
                                       std::move(parts));
}

StatusOr<std::shared_ptr<Model>> ModelLoader::LoadModel(const std::string& path,
                                                        const ModelConfig& config,
                                                        const std::string& name,
                                                        const std::string& version) const {
  const std::string model_dir = layout_->ModelDir(name);
  ModelOptions options;
  options.entry_point = config.entry_point;
  options.trusted_keys = options_.trusted_keys;
  options.load_timeout = options_.load_timeout;
  options.devices = config.devices;
  if (config.has_signature()) {
    CHORUS_ASSIGN_OR_RETURN(options.signature, SignatureManifest(config, name, version));
  }
  StatusOr<std::shared_ptr<Model>> model = Model::Load(placement_->manager(), path, options);
  if (!model.ok() && model.status().code() == StatusCode::kNotFound && !config.entry_point) {
    return NeedsConfigError(path, model_dir, ModelFormat::kTorchPackage);  // no manifest
  }
  if (!model.ok() && model.status().code() == StatusCode::kFailedPrecondition &&
      !config.has_signature() && IsAotInductor(path)) {
    return NeedsConfigError(path, model_dir, ModelFormat::kAotInductor);  // no signature
  }
  if (!model.ok()) return model.status();
  CHORUS_RETURN_IF_ERROR(CheckFormat(config.format, **model, path));
  if ((*model)->carries_signature()) {
    CHORUS_RETURN_IF_ERROR(CheckNoSecondSignature(**model, config, path));
    return model;
  }
  if (!config.has_signature()) return NeedsConfigError(path, model_dir, (*model)->format());
  if (!config.outputs.empty()) return model;
  return LoadWithProbedOutputs(**model, path, config, std::move(options));
}

StatusOr<std::shared_ptr<Model>> ModelLoader::LoadWithProbedOutputs(Model& probed,
                                                                    const std::string& path,
                                                                    const ModelConfig& config,
                                                                    ModelOptions options) const {
  CHORUS_ASSIGN_OR_RETURN(
      options.signature->outputs,
      ProbeOutputs(probed, *options.signature, config.decoupled, options_.probe_timeout));
  return Model::Load(placement_->manager(), path, options);
}

}  // namespace chorus
