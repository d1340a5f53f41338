#include "server/src/model_repository.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "chorus/common/file_util.h"
#include "chorus/common/logging.h"
#include "chorus/common/numbers.h"

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

// Scheduling for a model: its manifest's batching hints, then config.json.
StatusOr<SchedulerOptions> SchedulingFor(const std::string& model_dir, const Manifest& manifest,
                                         const RepositoryOptions& options) {
  SchedulerOptions scheduling;
  scheduling.max_queue = options.max_queue;
  scheduling.workers = options.workers;
  scheduling.batching.enabled = manifest.batching.batchable && manifest.batching.max_batch_size > 1;
  scheduling.batching.batch_dim = manifest.batching.batch_dim;
  scheduling.batching.max_batch_size = std::max<int64_t>(1, manifest.batching.max_batch_size);
  StatusOr<std::string> text = ReadFile(model_dir + "/config.json");
  if (!text.ok()) return scheduling;  // no overrides
  nlohmann::json config = nlohmann::json::parse(*text, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return InvalidArgumentError(model_dir + "/config.json is not a JSON object");
  }
  try {
    if (config.contains("dynamic_batching")) {
      scheduling.batching.enabled =
          config["dynamic_batching"].get<bool>() && manifest.batching.batchable;
    }
    if (config.contains("max_batch_size")) {
      scheduling.batching.max_batch_size = config["max_batch_size"].get<int64_t>();
    }
    if (config.contains("max_queue_delay_us")) {
      scheduling.batching.max_queue_delay =
          std::chrono::microseconds(config["max_queue_delay_us"].get<int64_t>());
    }
    if (config.contains("preferred_batch_sizes")) {
      scheduling.batching.preferred_batch_sizes =
          config["preferred_batch_sizes"].get<std::vector<int64_t>>();
    }
    if (config.contains("max_queue")) scheduling.max_queue = config["max_queue"].get<size_t>();
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(model_dir + "/config.json: " + e.what());
  }
  return scheduling;
}

}  // namespace

LoadedModel::LoadedModel(std::string name, std::string version, std::shared_ptr<Model> model,
                         const SchedulerOptions& options)
    : name_(std::move(name)), version_(std::move(version)), model_(std::move(model)) {
  scheduler_ = std::make_unique<ModelScheduler>(
      model_, options, [this](const ExecutionStats& stats) { RecordExecution(stats); });
}

LoadedModel::~LoadedModel() { scheduler_.reset(); }

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
  std::string archive;
  for (const std::string& file : Entries(model_dir + "/" + version, /*directories=*/false)) {
    if (file.size() > 3 && file.compare(file.size() - 3, 3, ".pt") == 0) {
      archive = model_dir + "/" + version + "/" + file;
      break;
    }
  }
  if (archive.empty())
    return NotFoundError("model " + name + " version " + version + " has no .pt archive");
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Model> model, Model::Load(manager_, archive));
  if (model->manifest() == nullptr) {
    return FailedPreconditionError(archive +
                                   " has no chorus manifest: the server needs its "
                                   "signature (package it with chorus-package)");
  }
  CHORUS_ASSIGN_OR_RETURN(SchedulerOptions scheduling,
                          SchedulingFor(model_dir, *model->manifest(), options_));
  scheduling.label = name + " version " + version;
  return std::make_shared<LoadedModel>(name, version, std::move(model), scheduling);
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
  if (replaced) replaced->scheduler().Drain(Clock::now() + options_.drain_timeout);
  return OkStatus();
}

Status ModelRepository::Unload(const std::string& name) {
  std::shared_ptr<LoadedModel> unloaded;
  {
    MutexLock lock(&mu_);
    auto it = loaded_.find(name);
    if (it == loaded_.end()) return NotFoundError("model " + name + " is not loaded");
    unloaded = std::move(it->second);
    loaded_.erase(it);
  }
  unloaded->scheduler().Drain(Clock::now() + options_.drain_timeout);
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
  for (const auto& model : Loaded()) model->scheduler().Drain(deadline);
}

}  // namespace chorus
