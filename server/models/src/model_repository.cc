#include "chorus/server/models/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "chorus/common/logging.h"
#include "chorus/common/numbers.h"
#include "chorus/server/config/triton_config.h"

namespace chorus {

ModelRepository::ModelRepository(std::string root, InterpreterPlacement* placement,
                                 RepositoryOptions options)
    : layout_(std::move(root)),
      options_(std::move(options)),
      placement_(placement),
      loader_(&layout_, placement, options_,
              [this](const std::string& name, const std::string& version) {
                return Find(name, version);
              }) {
  MutexLock lock(&mu_);
  for (const auto& [name, why] : options_.quarantined) records_[name].quarantine = why;
}

ModelRepository::~ModelRepository() {
  std::map<std::string, Record> records;
  {
    MutexLock lock(&mu_);
    records.swap(records_);
  }
}

namespace {

// `message` with the repository's own path taken out of the paths in it
// ("/srv/models/m/1/model.pt" -> "m/1/model.pt"): clients see where in the
// repository, not where on the server's disks; the log keeps the full text.
std::string WithoutRoot(std::string message, const std::string& root) {
  std::vector<std::string> prefixes = {root + "/"};
  std::error_code error;
  const std::string canonical = std::filesystem::weakly_canonical(root, error).string();
  if (!error && canonical != root) prefixes.push_back(canonical + "/");
  for (const std::string& prefix : prefixes) {
    for (size_t at = message.find(prefix); at != std::string::npos; at = message.find(prefix, at)) {
      message.erase(at, prefix.size());
    }
  }
  return message;
}

// Whether a version of `versions` (a Record's) serves.
template <typename Versions>
bool HasReady(const Versions& versions) {
  return std::any_of(versions.begin(), versions.end(),
                     [](const auto& version) { return version.second.model != nullptr; });
}

// The versions of `on_disk` (number -> folder) that `config`'s policy names.
// An ensemble needs no version folder: version 1 then.
std::map<int64_t, std::string> PolicyVersions(std::map<int64_t, std::string> on_disk,
                                              const ModelConfig& config) {
  if (config.ensemble && on_disk.empty()) return {{1, "1"}};
  const VersionPolicy& policy = config.version_policy;
  if (policy.kind == VersionPolicy::Kind::kAll) return on_disk;
  std::map<int64_t, std::string> chosen;
  if (policy.kind == VersionPolicy::Kind::kSpecific) {
    for (int64_t version : policy.versions) {
      if (auto it = on_disk.find(version); it != on_disk.end()) chosen.insert(*it);
    }
    return chosen;
  }
  for (auto it = on_disk.rbegin();
       it != on_disk.rend() && static_cast<int64_t>(chosen.size()) < policy.latest; ++it) {
    chosen.insert(*it);
  }
  return chosen;
}

// A load call's config (Triton's JSON form) for model `name`, as Triton
// takes it: normalized, then mapped as a config.pbtxt is.
StatusOr<ModelConfig> OverrideConfig(const std::string& name, const std::string& json) {
  StatusOr<inference::ModelConfig> triton = TritonConfigFromJson(json);
  if (!triton.ok())
    return InvalidArgumentError("Invalid config override: " + triton.status().message());
  if (!triton->name().empty() && triton->name() != name) {
    return InvalidArgumentError("the config override names model '" + triton->name() + "', not '" +
                                name + "'");
  }
  NormalizeTritonConfig(name, &*triton);
  return ModelConfigFromTriton(*triton, name);
}

std::string Unknown(const std::string& name) { return "Request for unknown model: '" + name + "'"; }

}  // namespace

Status ModelRepository::LoadAll() {
  CHORUS_RETURN_IF_ERROR(layout_.CheckRoot());
  std::vector<std::string> names;
  for (const std::string& name : layout_.ModelNames()) {
    MutexLock lock(&mu_);
    auto it = records_.find(name);
    if (it != records_.end() && !it->second.quarantine.empty()) {
      Log().error("model {} not loaded: {}", name, it->second.quarantine);
      continue;
    }
    names.push_back(name);
  }
  LoadInOrder(names);
  return OkStatus();
}

StatusOr<ModelConfig> ModelRepository::ConfigOf(const std::string& name) const {
  const std::string model_dir = layout_.ModelDir(name);
  if (!options_.config_name.empty()) {
    const std::string path = model_dir + "/configs/" + options_.config_name + ".pbtxt";
    StatusOr<std::string> text = ReadFile(path);
    if (text.ok()) {
      StatusOr<inference::ModelConfig> triton = ParseTritonConfig(*text);
      StatusOr<ModelConfig> config = triton.status();
      if (triton.ok()) {
        NormalizeTritonConfig(name, &*triton);
        config = ModelConfigFromTriton(*triton, name);
      }
      if (!config.ok())
        return Status(config.status().code(), path + ": " + config.status().message());
      return config;
    }
    if (text.status().code() != StatusCode::kNotFound) return text.status();
  }
  return ReadModelConfig(model_dir);
}

void ModelRepository::LoadSteps(const std::string& name, const ModelConfig& config, int depth) {
  if (!config.ensemble || depth > 8) return;  // deeper: a cycle, planned out
  for (const EnsembleStep& step : *config.ensemble) {
    if (step.model_name == name || !layout_.HasModel(step.model_name)) continue;
    {
      // Not one that serves, is quarantined, or failed its last load (loaded
      // again only when asked by name).
      MutexLock lock(&mu_);
      auto it = records_.find(step.model_name);
      if (it != records_.end() && (HasReady(it->second.versions) || it->second.loading ||
                                   !it->second.quarantine.empty() || !it->second.failure.empty())) {
        continue;
      }
    }
    if (StatusOr<ModelConfig> steps = ConfigOf(step.model_name); steps.ok()) {
      LoadSteps(step.model_name, *steps, depth + 1);
    }
    Log().info("model {}: loading {}, a step of it", name, step.model_name);
    LoadModel(step.model_name, false).IgnoreError();  // logged; the ensemble's plan names it
  }
}

void ModelRepository::LoadInOrder(const std::vector<std::string>& names) {
  std::map<std::string, std::vector<std::string>> ensembles;  // -> its steps' models
  for (const std::string& name : names) {
    StatusOr<ModelConfig> config = ConfigOf(name);
    if (!config.ok() || !config->ensemble) {
      LoadModel(name, false).IgnoreError();  // logged; the model is listed UNAVAILABLE
      continue;
    }
    for (const EnsembleStep& step : *config->ensemble) ensembles[name].push_back(step.model_name);
  }
  // An ensemble loads once the ensembles among its steps have been tried
  // (all at once if they wait on each other).
  while (!ensembles.empty()) {
    std::vector<std::string> ready;
    for (const auto& [name, steps] : ensembles) {
      if (std::none_of(steps.begin(), steps.end(),
                       [&](const std::string& step) { return ensembles.count(step) > 0; })) {
        ready.push_back(name);
      }
    }
    if (ready.empty()) ready.push_back(ensembles.begin()->first);
    for (const std::string& name : ready) {
      Load(name).IgnoreError();
      ensembles.erase(name);
    }
  }
}

Status ModelRepository::Load(const std::string& name, const ModelOverride& override) {
  return LoadModel(name, true, override);
}

Status ModelRepository::LoadModel(const std::string& name, bool readmit,
                                  const ModelOverride& override) {
  CHORUS_RETURN_IF_ERROR(CheckModelName(name));
  if (!override.files.empty() && override.config_json.empty()) {
    return InvalidArgumentError(
        "Load parameter 'config' must be specified for model file override");
  }
  CHORUS_ASSIGN_OR_RETURN(int quarantines, BeginLoad(name, readmit, !override.files.empty()));
  StatusOr<LoadPlan> plan = Plan(name, override);
  if (!plan.ok()) {
    return FailBeforeVersions(name, plan.status(),
                              plan.status().Annotate("failed to load '" + name +
                                                     "', failed to poll from model repository"));
  }
  if (plan->versions.empty()) {
    const Status none = NotFoundError(
        "at least one version must be available under the version policy of model '" + name + "'" +
        (plan->has_version_folders ? ": it names none of the version folders"
                                   : ": the model has no numbered version folder"));
    return FailBeforeVersions(name, none, none.Annotate("load failed for model '" + name + "'"));
  }
  LoadSteps(name, plan->config);
  {
    MutexLock lock(&mu_);
    Record& record = records_[name];
    for (const auto& [version, folder] : plan->versions) {
      Slot& slot = record.versions[version];
      if (slot.model == nullptr) slot = Slot{ModelState::kLoading, nullptr, "", nullptr};
    }
  }
  const std::string fingerprint = Fingerprint(name);
  std::vector<Retired> retired;
  Status status = Settle(name, *plan, LoadVersions(name, *plan), quarantines, &retired);
  {
    MutexLock lock(&mu_);
    records_[name].fingerprint = fingerprint;
  }
  Drain(std::move(retired));
  return status;
}

StatusOr<int> ModelRepository::BeginLoad(const std::string& name, bool readmit, bool has_files) {
  const bool exists = has_files || layout_.HasModel(name);
  MutexLock lock(&mu_);
  if (!exists) {
    // Gone from the repository: no longer listed (unless a version of it serves).
    auto it = records_.find(name);
    if (it != records_.end() && !HasReady(it->second.versions)) records_.erase(it);
    return NotFoundError("failed to load '" + name +
                         "', failed to poll from model repository: no model folder \"" + name +
                         "\" in the repository");
  }
  Record& record = records_[name];
  if (!record.quarantine.empty()) {
    if (!readmit) return UnavailableError("model \"" + name + "\" " + record.quarantine);
    Log().warn("model {} re-admitted from quarantine by an explicit load", name);
    record.quarantine.clear();
  }
  record.loading = true;
  return record.quarantines;
}

StatusOr<ModelRepository::LoadPlan> ModelRepository::Plan(const std::string& name,
                                                          const ModelOverride& override) const {
  LoadPlan plan;
  if (!override.files.empty()) {
    CHORUS_ASSIGN_OR_RETURN(ScopedTempDir files, WritePrivateModelFolder(name, override.files));
    plan.files = std::make_shared<const ScopedTempDir>(std::move(files));
  }
  if (!override.config_json.empty()) {
    CHORUS_ASSIGN_OR_RETURN(plan.config, OverrideConfig(name, override.config_json));
  } else {
    CHORUS_ASSIGN_OR_RETURN(plan.config, ConfigOf(name));
  }
  const RepositoryLayout source(plan.files ? plan.files->path() : layout_.root());
  std::map<int64_t, std::string> on_disk = source.Versions(name);
  plan.has_version_folders = !on_disk.empty();
  plan.versions = PolicyVersions(std::move(on_disk), plan.config);
  return plan;
}

Status ModelRepository::FailBeforeVersions(const std::string& name, const Status& reason,
                                           const Status& answer) {
  Log().error("model {} not loaded: {}", name, reason.ToString());
  MutexLock lock(&mu_);
  Record& record = records_[name];
  record.loading = false;
  // A failed reload keeps the versions that serve; otherwise what was listed
  // of earlier loads gives way to why this one failed.
  if (!HasReady(record.versions)) {
    record.versions.clear();
    record.failure = WithoutRoot(reason.ToString(), layout_.root());
  }
  return Status(answer.code(), WithoutRoot(answer.message(), layout_.root()));
}

std::vector<ModelRepository::Outcome> ModelRepository::LoadVersions(const std::string& name,
                                                                    const LoadPlan& plan) const {
  // A load call's files are a repository of their own, in their private folder.
  std::optional<RepositoryLayout> private_layout;
  std::optional<ModelLoader> private_loader;
  if (plan.files) {
    private_layout.emplace(plan.files->path());
    private_loader.emplace(&*private_layout, placement_, options_,
                           [this](const std::string& model, const std::string& version) {
                             return Find(model, version);
                           });
  }
  const ModelLoader& loader = plan.files ? *private_loader : loader_;
  std::vector<Outcome> outcomes;
  for (const auto& [version, folder] : plan.versions) {
    outcomes.push_back({version, loader.Load(name, folder, plan.config)});
  }
  return outcomes;
}

Status ModelRepository::Settle(const std::string& name, const LoadPlan& plan,
                               std::vector<Outcome> outcomes, int quarantines,
                               std::vector<Retired>* retired) {
  MutexLock lock(&mu_);
  Record& record = records_[name];
  record.loading = false;
  if (record.quarantines != quarantines) {
    Log().error("model {} was quarantined while it loaded: not served", name);
    for (Outcome& outcome : outcomes) {
      if (outcome.loaded.ok()) retired->push_back({Slot{{}, *outcome.loaded, "", nullptr}, false});
    }
    record.versions.clear();
    return UnavailableError("model \"" + name + "\" was quarantined while it loaded");
  }
  auto failed = std::find_if(outcomes.begin(), outcomes.end(),
                             [](const Outcome& outcome) { return !outcome.loaded.ok(); });
  if (failed != outcomes.end()) {
    const Outcome first = *failed;
    return SettleFailed(name, record, first, outcomes, retired);
  }
  SettleLoaded(name, record, plan, outcomes, retired);
  return OkStatus();
}

Status ModelRepository::SettleFailed(const std::string& name, Record& record, const Outcome& failed,
                                     std::vector<Outcome>& outcomes,
                                     std::vector<Retired>* retired) {
  const std::string failed_why = WithoutRoot(failed.loaded.status().ToString(), layout_.root());
  for (Outcome& outcome : outcomes) {
    Slot& slot = record.versions[outcome.version];
    if (outcome.loaded.ok()) {  // all or nothing: not served
      retired->push_back({Slot{{}, *outcome.loaded, "", nullptr}, false});
    } else {
      Log().error("model {} not loaded: version {}: {}", name, outcome.version,
                  outcome.loaded.status().ToString());
    }
    if (slot.model != nullptr) continue;  // the version that served before serves on
    slot.state = ModelState::kUnavailable;
    slot.reason =
        outcome.loaded.ok()
            ? "unloaded: version " + std::to_string(failed.version) + " of the same load failed"
            : WithoutRoot(outcome.loaded.status().ToString(), layout_.root());
  }
  if (!HasReady(record.versions)) record.failure = failed_why;
  return Status(failed.loaded.status().code(), "load failed for model '" + name + "': version " +
                                                   std::to_string(failed.version) +
                                                   " is at UNAVAILABLE state: " + failed_why);
}

void ModelRepository::SettleLoaded(const std::string& name, Record& record, const LoadPlan& plan,
                                   std::vector<Outcome>& outcomes, std::vector<Retired>* retired) {
  for (Outcome& outcome : outcomes) {
    Slot& slot = record.versions[outcome.version];
    if (slot.model != nullptr) retired->push_back({std::move(slot), true});
    slot = Slot{ModelState::kReady, std::move(*outcome.loaded), "", plan.files};
    Log().info("model {} version {} loaded", name, slot.model->version());
  }
  // Versions the policy no longer names leave service (Triton's reload).
  for (auto& [version, slot] : record.versions) {
    if (plan.versions.count(version) > 0) continue;
    if (slot.model != nullptr) retired->push_back({std::move(slot), true});
    slot = Slot{ModelState::kUnavailable, nullptr, "unloaded", nullptr};
  }
  record.failure.clear();
}

void ModelRepository::Drain(std::vector<Retired> retired) const {
  const Clock::time_point now = Clock::now();
  for (Retired& gone : retired) {
    gone.slot.model->Drain(gone.served ? now + options_.drain_timeout : now);
  }
}

std::string ModelRepository::Fingerprint(const std::string& name) const {
  namespace fs = std::filesystem;
  std::vector<std::string> entries;
  std::error_code error;
  for (fs::recursive_directory_iterator it(layout_.ModelDir(name), error), end; !error && it != end;
       it.increment(error)) {
    if (!it->is_regular_file(error)) continue;
    const auto written = fs::last_write_time(it->path(), error).time_since_epoch().count();
    entries.push_back(it->path().string() + ":" + std::to_string(it->file_size(error)) + ":" +
                      std::to_string(written));
  }
  std::sort(entries.begin(), entries.end());
  std::string fingerprint;
  for (const std::string& entry : entries) fingerprint += entry + "\n";
  return fingerprint;
}

void ModelRepository::Poll() {
  std::vector<std::string> present = layout_.ModelNames();
  std::vector<std::string> files;  // read before the lock: file system calls
  for (const std::string& name : present) files.push_back(Fingerprint(name));
  std::vector<std::string> changed, gone;
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < present.size(); ++i) {
      auto it = records_.find(present[i]);
      if (it != records_.end() && !it->second.quarantine.empty()) continue;
      if (it == records_.end() || it->second.fingerprint != files[i]) changed.push_back(present[i]);
    }
    for (const auto& [name, record] : records_) {
      if (std::find(present.begin(), present.end(), name) == present.end()) gone.push_back(name);
    }
  }
  for (const std::string& name : gone) {
    Log().info("model {}: its folder is gone from the repository; unloading it", name);
    Unload(name).IgnoreError();
    MutexLock lock(&mu_);
    records_.erase(name);
  }
  LoadInOrder(changed);  // Load logs failures
}

Status ModelRepository::Unload(const std::string& name) {
  std::vector<Retired> retired;
  {
    MutexLock lock(&mu_);
    auto it = records_.find(name);
    if (it == records_.end()) return NotFoundError("model " + name + " is not loaded");
    Record& record = it->second;
    for (auto& [version, slot] : record.versions) {
      if (slot.model != nullptr) retired.push_back({std::move(slot), true});
      slot = Slot{ModelState::kUnavailable, nullptr, "unloaded", nullptr};
    }
    if (retired.empty()) {
      // One that failed to load is taken out of service (its error forgotten).
      if (record.failure.empty()) return NotFoundError("model " + name + " is not loaded");
      record.failure.clear();
      return OkStatus();
    }
    record.failure.clear();
  }
  Drain(std::move(retired));
  Log().info("model {} unloaded", name);
  return OkStatus();
}

void ModelRepository::Quarantine(const std::string& name, const std::string& why) {
  std::vector<Retired> retired;
  {
    MutexLock lock(&mu_);
    Record& record = records_[name];
    record.quarantine = why;
    record.quarantines += 1;  // a load under way does not serve
    for (auto& [version, slot] : record.versions) {
      if (slot.model != nullptr) retired.push_back({std::move(slot), true});
    }
    record.versions.clear();
  }
  Log().error("model {} {}", name, why);
  Drain(std::move(retired));
}

StatusOr<PublishedVersion> ModelRepository::Publish(const std::string& name, int64_t version,
                                                    const RepositoryLayout::VersionWriter& write) {
  CHORUS_ASSIGN_OR_RETURN(PublishedVersion published, layout_.Publish(name, version, write));
  CHORUS_RETURN_IF_ERROR(Load(name));
  return published;
}

Status ModelRepository::NoVersionReady(const std::string& name, const std::string& version,
                                       const Record& record) {
  if (!record.quarantine.empty()) {
    return UnavailableError(Unknown(name) + " has no available versions: model \"" + name + "\" " +
                            record.quarantine);
  }
  if (!version.empty()) {
    std::optional<int64_t> number = ParseNonNegativeInt64(version);
    auto slot = number ? record.versions.find(*number) : record.versions.end();
    if (slot == record.versions.end()) {
      return NotFoundError(Unknown(name) + " version " + version + " is not found");
    }
    const std::string why =
        slot->second.state == ModelState::kLoading ? "being loaded" : slot->second.reason;
    return UnavailableError(Unknown(name) + " version " + version + " is not at ready state" +
                            (why.empty() ? "" : ": " + why));
  }
  if (record.loading) {
    return UnavailableError(Unknown(name) + " has no available versions: it is being loaded");
  }
  // In the repository but not serving (Triton: UNAVAILABLE), with why.
  if (!record.failure.empty()) {
    return UnavailableError(Unknown(name) +
                            " has no available versions: it failed to load: " + record.failure);
  }
  return NotFoundError(Unknown(name) + " has no available versions");
}

StatusOr<std::shared_ptr<LoadedModel>> ModelRepository::Find(const std::string& name,
                                                             const std::string& version) const {
  MutexLock lock(&mu_);
  auto it = records_.find(name);
  if (it == records_.end()) return NotFoundError(Unknown(name) + " is not found");
  const Record& record = it->second;
  if (version.empty()) {
    for (auto slot = record.versions.rbegin(); slot != record.versions.rend(); ++slot) {
      if (slot->second.model != nullptr) return slot->second.model;
    }
  } else if (std::optional<int64_t> number = ParseNonNegativeInt64(version)) {
    auto slot = record.versions.find(*number);
    if (slot != record.versions.end() && slot->second.model != nullptr) return slot->second.model;
  }
  return NoVersionReady(name, version, record);
}

std::vector<std::string> ModelRepository::ReadyVersions(const std::string& name) const {
  MutexLock lock(&mu_);
  std::vector<std::string> versions;
  auto it = records_.find(name);
  if (it == records_.end()) return versions;
  for (const auto& [number, slot] : it->second.versions) {
    if (slot.model != nullptr) versions.push_back(slot.model->version());
  }
  return versions;
}

std::vector<std::shared_ptr<LoadedModel>> ModelRepository::Loaded() const {
  MutexLock lock(&mu_);
  std::vector<std::shared_ptr<LoadedModel>> models;
  for (const auto& [name, record] : records_) {
    for (const auto& [number, slot] : record.versions) {
      if (slot.model) models.push_back(slot.model);
    }
  }
  return models;
}

bool ModelRepository::AllLoaded() const {
  MutexLock lock(&mu_);
  for (const auto& [name, record] : records_) {
    if (!record.failure.empty() && record.quarantine.empty()) return false;
  }
  return true;
}

std::vector<RepositoryEntry> ModelRepository::Index() const {
  std::vector<std::string> names = layout_.ModelNames();
  std::vector<RepositoryEntry> index;
  MutexLock lock(&mu_);
  for (const auto& [name, record] : records_) {  // served from a load call's files only
    if (HasReady(record.versions) && !layout_.HasModel(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    auto it = records_.find(name);
    if (it == records_.end()) {
      index.push_back({name, "", ModelState::kUnavailable, "unloaded"});
      continue;
    }
    const Record& record = it->second;
    if (!record.quarantine.empty()) {
      index.push_back({name, "", ModelState::kUnavailable, record.quarantine});
    } else if (record.versions.empty()) {
      if (record.loading) {
        index.push_back({name, "", ModelState::kLoading, "being loaded"});
      } else {
        index.push_back({name, "", ModelState::kUnavailable,
                         record.failure.empty() ? std::string("unloaded") : record.failure});
      }
    }
    for (const auto& [number, slot] : record.versions) {
      const std::string version = slot.model ? slot.model->version() : std::to_string(number);
      index.push_back({name, version, slot.state, slot.reason});
    }
  }
  return index;
}

void ModelRepository::DrainAll(Clock::time_point deadline) {
  for (const auto& model : Loaded()) model->Drain(deadline);
}

}  // namespace chorus
