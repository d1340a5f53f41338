#include "chorus/server/models/model_repository.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "chorus/common/file_util.h"
#include "chorus/common/logging.h"
#include "chorus/common/numbers.h"
#include "chorus/package/dtype.h"
#include "chorus/package/torch_dtype.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> Entries(const std::string& dir, bool directories) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* entry = readdir(d)) {
    std::string name = entry->d_name;
    if (name.empty() || name[0] == '.') continue;
    struct stat st;
    if (::stat((dir + "/" + name).c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode) == directories) names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Scheduling for a model: its manifest's batching hints, then its config.
SchedulerOptions SchedulingFor(const ModelConfig& config, const Manifest& manifest,
                               const RepositoryOptions& options) {
  SchedulerOptions scheduling;
  scheduling.max_queue = config.max_queue.value_or(options.max_queue);
  scheduling.workers = options.workers;
  const Batching& hint = manifest.batching;
  scheduling.batching.enabled =
      hint.batchable && hint.max_batch_size > 1 && config.dynamic_batching.value_or(true);
  scheduling.batching.batch_dim = hint.batch_dim;
  scheduling.batching.max_batch_size =
      std::max<int64_t>(1, config.max_batch_size.value_or(hint.max_batch_size));
  if (config.max_queue_delay) scheduling.batching.max_queue_delay = *config.max_queue_delay;
  scheduling.decoupled = config.decoupled;
  if (config.decoupled) scheduling.batching.enabled = false;  // a stream runs alone
  if (config.preferred_batch_sizes) {
    scheduling.batching.preferred_batch_sizes = *config.preferred_batch_sizes;
  }
  return scheduling;
}

// The model file of a version folder: the config's default_model_filename,
// else the first *.pt or *.pt2 file there by name.
StatusOr<std::string> ModelFile(const std::string& version_dir, const ModelConfig& config) {
  if (!config.default_model_filename.empty()) {
    const std::string path = version_dir + "/" + config.default_model_filename;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return NotFoundError(path + " (config.json's default_model_filename) does not exist");
    }
    return path;
  }
  for (const std::string& file : Entries(version_dir, /*directories=*/false)) {
    const std::string extension = file.substr(std::min(file.size(), file.rfind('.')));
    if (extension == ".pt" || extension == ".pt2") return version_dir + "/" + file;
  }
  return NotFoundError(version_dir + " has no .pt or .pt2 file (or set default_model_filename)");
}

// Zeros (empty strings for string inputs) for every input of `manifest`,
// any-size dimensions made 1.
std::vector<c10::IValue> ZeroInputs(const Manifest& manifest) {
  std::vector<c10::IValue> inputs;
  for (const TensorSpec& spec : manifest.inputs) {
    std::vector<int64_t> shape = spec.shape;
    for (int64_t& size : shape) size = std::max<int64_t>(size, 1);
    const Dtype dtype = DtypeByName(spec.dtype)->dtype;
    if (dtype == Dtype::kString) {
      const int64_t count = c10::multiply_integers(shape);
      inputs.push_back(StringTensorToIValue({shape, std::vector<std::string>(count)}));
    } else {
      inputs.emplace_back(at::zeros(shape, at::TensorOptions().dtype(ScalarTypeOf(dtype))));
    }
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

// The outputs' signature, from one run of `model` on zeros, interrupted after
// `timeout` (model code may never end on zeros): their dtypes and shapes (the
// batch dimension, if batched, any-size), named output0, ...
StatusOr<std::vector<TensorSpec>> ProbeOutputs(Model& model, const Manifest& signature,
                                               bool decoupled, std::chrono::milliseconds timeout) {
  CallOptions call;
  call.deadline = std::chrono::steady_clock::now() + timeout;
  // A decoupled model's first response stands for all.
  StatusOr<c10::IValue> result = InternalError("the model yielded nothing on zeros");
  if (decoupled) {
    Status called = model.ForwardEach(ZeroInputs(signature), call, [&](const c10::IValue& value) {
      result = value;
      return false;
    });
    if (!called.ok()) result = called;
  } else {
    result = model.Forward(ZeroInputs(signature), call);
  }
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
Status NeedsConfigError(const std::string& path, const std::string& model_dir, ArchiveKind kind) {
  const bool package = kind == ArchiveKind::kTorchPackage;
  const std::string what = ArchiveKindName(kind);
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

ModelFormat FormatOf(const Model& model) {
  switch (model.kind()) {
    case ArchiveKind::kTorchPackage:
      return model.archive()->manifest() ? ModelFormat::kChorus : ModelFormat::kTorchPackage;
    case ArchiveKind::kTorchScript:
      return ModelFormat::kTorchScript;
    case ArchiveKind::kTorchExport:
      return ModelFormat::kTorchExport;
    case ArchiveKind::kAotInductor:
      return ModelFormat::kAotInductor;
  }
  return ModelFormat::kDetect;
}

Status CheckFormat(ModelFormat expected, const Model& model, const std::string& path) {
  const ModelFormat actual = FormatOf(model);
  if (expected == ModelFormat::kDetect || expected == actual) return OkStatus();
  return InvalidArgumentError("config.json: format: " + path + " is of format " +
                              ModelFormatName(actual) + ", not what format says");
}

}  // namespace

LoadedModel::LoadedModel(std::string name, std::string version, std::shared_ptr<Model> model,
                         const SchedulerOptions& options, InterpreterManager* manager,
                         std::optional<GenerationOptions> generation)
    : name_(std::move(name)),
      version_(std::move(version)),
      model_(std::move(model)),
      scheduling_(options) {
  scheduler_ = std::make_unique<ModelScheduler>(
      model_, options, [this](const ExecutionStats& stats) { RecordExecution(stats); });
  if (generation && manager != nullptr) {
    if (generation->engines <= 0) generation->engines = manager->size();
    generation->label = options.label;
    generation_ = std::make_unique<GenerationScheduler>(model_, manager, *generation);
  }
}

void LoadedModel::Drain(std::chrono::steady_clock::time_point deadline) {
  if (generation_ && !generation_->Drain(deadline)) {
    Log().warn("model {}: generations still running at the drain deadline are cut short", name_);
  }
  scheduler_->Drain(deadline);
}

LoadedModel::~LoadedModel() {
  generation_.reset();
  scheduler_.reset();
}

void LoadedModel::RecordExecution(const ExecutionStats& stats) {
  MutexLock lock(&mu_);
  if (!stats.ok) return;
  stats_.execution_count += 1;
  stats_.inference_count += stats.batch_size;
  auto& batch = stats_.batches[stats.batch_size];
  batch.count += 1;
  batch.ns += stats.compute_time.count();
  stats_.compute_infer.count += 1;
  stats_.compute_infer.ns += stats.compute_time.count();
}

void LoadedModel::RecordRequest(const InferenceResult& result, std::chrono::nanoseconds total) {
  MutexLock lock(&mu_);
  auto& bucket = result.status.ok() ? stats_.success : stats_.fail;
  bucket.count += 1;
  bucket.ns += total.count();
  stats_.queue.count += 1;
  stats_.queue.ns += result.queue_time.count();
  stats_.last_inference_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
}

ModelStatsSnapshot LoadedModel::Snapshot() const {
  ModelStatsSnapshot snapshot;
  {
    MutexLock lock(&mu_);
    snapshot = stats_;
  }
  snapshot.pending = scheduler_->pending();
  return snapshot;
}

ModelRepository::ModelRepository(std::string root, InterpreterManager* manager,
                                 RepositoryOptions options)
    : root_(std::move(root)), manager_(manager), options_(options) {
  MutexLock lock(&mu_);
  quarantined_ = options_.quarantined;
}

ModelRepository::~ModelRepository() {
  std::map<std::string, std::shared_ptr<LoadedModel>> loaded;
  {
    MutexLock lock(&mu_);
    loaded.swap(loaded_);
  }
}

StatusOr<std::shared_ptr<LoadedModel>> ModelRepository::LoadVersion(const std::string& name) {
  const std::string model_dir = root_ + "/" + name;
  CHORUS_ASSIGN_OR_RETURN(ModelConfig config, ReadModelConfig(model_dir));
  std::string version;
  int64_t highest = -1;
  for (const std::string& entry : Entries(model_dir, /*directories=*/true)) {
    // Folders that are not an int64 (too long, not digits) are not versions.
    std::optional<int64_t> number = ParseNonNegativeInt64(entry);
    if (number && *number > highest) {
      highest = *number;
      version = entry;
    }
  }
  if (version.empty()) return NotFoundError("model " + name + " has no numbered version folder");
  CHORUS_ASSIGN_OR_RETURN(std::string path, ModelFile(model_dir + "/" + version, config));
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Model> model,
                          LoadModel(path, model_dir, config, name, version));
  SchedulerOptions scheduling = SchedulingFor(config, *model->manifest(), options_);
  scheduling.label = name + " version " + version;
  return std::make_shared<LoadedModel>(name, version, std::move(model), scheduling, manager_,
                                       config.generation);
}

StatusOr<std::shared_ptr<Model>> ModelRepository::LoadModel(const std::string& path,
                                                            const std::string& model_dir,
                                                            const ModelConfig& config,
                                                            const std::string& name,
                                                            const std::string& version) {
  ModelOptions options;
  options.entry_point = config.entry_point;
  options.trusted_keys = options_.trusted_keys;
  options.load_timeout = options_.load_timeout;
  if (config.has_signature()) {
    CHORUS_ASSIGN_OR_RETURN(options.signature, SignatureManifest(config, name, version));
  }
  StatusOr<std::shared_ptr<Model>> model = Model::Load(manager_, path, options);
  if (!model.ok() && model.status().code() == StatusCode::kNotFound && !config.entry_point) {
    return NeedsConfigError(path, model_dir, ArchiveKind::kTorchPackage);  // no manifest
  }
  if (!model.ok() && model.status().code() == StatusCode::kFailedPrecondition &&
      !config.has_signature()) {
    return NeedsConfigError(path, model_dir, ArchiveKind::kAotInductor);  // no signature
  }
  if (!model.ok()) return model.status();
  CHORUS_RETURN_IF_ERROR(CheckFormat(config.format, **model, path));
  if ((*model)->carries_signature()) {
    if (config.has_signature() || config.entry_point) {
      return InvalidArgumentError(
          "config.json: " + std::string(config.entry_point ? "entry_point" : "inputs") + ": " +
          path + " (format " + ModelFormatName(FormatOf(**model)) +
          ") carries its own entry point and signature");
    }
    return model;
  }
  if (!config.has_signature()) return NeedsConfigError(path, model_dir, (*model)->kind());
  if (!config.outputs.empty()) return model;
  // Outputs left out: learned from one run, then the model is served with them.
  CHORUS_ASSIGN_OR_RETURN(
      options.signature->outputs,
      ProbeOutputs(**model, *options.signature, config.decoupled, options_.probe_timeout));
  return Model::Load(manager_, path, options);
}

Status ModelRepository::LoadAll() {
  struct stat st;
  if (::stat(root_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return NotFoundError("model repository " + root_ + " is not a directory");
  }
  for (const std::string& name : Entries(root_, /*directories=*/true)) {
    {
      MutexLock lock(&mu_);
      auto quarantined = quarantined_.find(name);
      if (quarantined != quarantined_.end()) {
        failures_[name] = quarantined->second;
        Log().error("model {} not loaded: {}", name, quarantined->second);
        continue;
      }
    }
    Load(name).IgnoreError();  // Load logs it; the model is listed UNAVAILABLE
  }
  return OkStatus();
}

Status CheckModelName(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') {
    return InvalidArgumentError("bad model name \"" + name + "\"");
  }
  return OkStatus();
}

Status ModelRepository::Load(const std::string& name) {
  CHORUS_RETURN_IF_ERROR(CheckModelName(name));
  {
    MutexLock lock(&mu_);
    if (quarantined_.erase(name) > 0) {
      Log().warn("model {} re-admitted from quarantine by an explicit load", name);
    }
  }
  struct stat st;
  if (::stat((root_ + "/" + name).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    MutexLock lock(&mu_);
    failures_.erase(name);  // gone from the repository: no longer listed
    return NotFoundError("no model \"" + name + "\" in the repository " + root_);
  }
  StatusOr<std::shared_ptr<LoadedModel>> model = LoadVersion(name);
  std::shared_ptr<LoadedModel> replaced;
  {
    MutexLock lock(&mu_);
    if (!model.ok()) {
      // A failed reload keeps the version that was serving.
      if (loaded_.count(name) == 0) failures_[name] = model.status().ToString();
      Log().error("model {} not loaded: {}", name, model.status().ToString());
      return model.status();
    }
    failures_.erase(name);
    replaced = loaded_[name];
    loaded_[name] = *model;
  }
  Log().info("model {} version {} loaded", name, (*model)->version());
  if (replaced) replaced->Drain(Clock::now() + options_.drain_timeout);
  return OkStatus();
}

Status ModelRepository::Unload(const std::string& name) {
  std::shared_ptr<LoadedModel> unloaded;
  {
    MutexLock lock(&mu_);
    auto it = loaded_.find(name);
    if (it == loaded_.end()) {
      // One that failed to load is taken out of service (its error forgotten).
      if (failures_.erase(name) > 0) return OkStatus();
      return NotFoundError("model " + name + " is not loaded");
    }
    unloaded = std::move(it->second);
    loaded_.erase(it);
  }
  unloaded->Drain(Clock::now() + options_.drain_timeout);
  Log().info("model {} unloaded", name);
  return OkStatus();
}

StatusOr<std::shared_ptr<LoadedModel>> ModelRepository::Find(const std::string& name,
                                                             const std::string& version) const {
  MutexLock lock(&mu_);
  auto it = loaded_.find(name);
  if (it == loaded_.end()) {
    auto quarantined = quarantined_.find(name);
    if (quarantined != quarantined_.end()) {
      return UnavailableError("model \"" + name + "\" " + quarantined->second);
    }
    // In the repository but not serving (Triton: UNAVAILABLE), with why.
    if (auto failed = failures_.find(name); failed != failures_.end()) {
      return UnavailableError("model \"" + name + "\" is not loaded: " + failed->second);
    }
    return NotFoundError("unknown model \"" + name + "\"");
  }
  if (!version.empty() && version != it->second->version()) {
    return NotFoundError("model \"" + name + "\" has no version \"" + version +
                         "\" loaded (serving version " + it->second->version() + ")");
  }
  return it->second;
}

std::vector<std::shared_ptr<LoadedModel>> ModelRepository::Loaded() const {
  MutexLock lock(&mu_);
  std::vector<std::shared_ptr<LoadedModel>> models;
  for (const auto& [name, model] : loaded_) models.push_back(model);
  return models;
}

bool ModelRepository::AllLoaded() const {
  MutexLock lock(&mu_);
  for (const auto& [name, reason] : failures_) {
    if (quarantined_.count(name) == 0) return false;
  }
  return true;
}

std::vector<RepositoryEntry> ModelRepository::Index() const {
  std::vector<RepositoryEntry> index;
  MutexLock lock(&mu_);
  for (const std::string& name : Entries(root_, /*directories=*/true)) {
    auto it = loaded_.find(name);
    if (it != loaded_.end()) {
      index.push_back({name, it->second->version(), "READY", ""});
    } else {
      auto failure = failures_.find(name);
      index.push_back(
          {name, "", "UNAVAILABLE", failure != failures_.end() ? failure->second : "unloaded"});
    }
  }
  return index;
}

void ModelRepository::DrainAll(Clock::time_point deadline) {
  for (const auto& model : Loaded()) model->Drain(deadline);
}

}  // namespace chorus
