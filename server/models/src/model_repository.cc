#include "chorus/server/models/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "chorus/common/logging.h"

namespace chorus {

using Clock = std::chrono::steady_clock;

ModelRepository::ModelRepository(std::string root, InterpreterPlacement* placement,
                                 RepositoryOptions options)
    : layout_(std::move(root)),
      options_(std::move(options)),
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

void ModelRepository::LoadSteps(const std::string& name, int depth) {
  StatusOr<ModelConfig> config = ReadModelConfig(layout_.ModelDir(name));
  if (!config.ok() || !config->ensemble || depth > 8) return;  // deeper: a cycle, planned out
  for (const EnsembleStep& step : *config->ensemble) {
    if (step.model_name == name || !layout_.HasModel(step.model_name)) continue;
    {
      // Not one that serves, is quarantined, or failed its last load (loaded
      // again only when asked by name).
      MutexLock lock(&mu_);
      auto it = records_.find(step.model_name);
      if (it != records_.end() &&
          (it->second.serving != nullptr || it->second.state == ModelState::kLoading ||
           !it->second.quarantine.empty() || !it->second.failure.empty())) {
        continue;
      }
    }
    LoadSteps(step.model_name, depth + 1);
    Log().info("model {}: loading {}, a step of it", name, step.model_name);
    LoadModel(step.model_name, false).IgnoreError();  // logged; the ensemble's plan names it
  }
}

void ModelRepository::LoadInOrder(const std::vector<std::string>& names) {
  std::map<std::string, std::vector<std::string>> ensembles;  // -> its steps' models
  for (const std::string& name : names) {
    StatusOr<ModelConfig> config = ReadModelConfig(layout_.ModelDir(name));
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

}  // namespace

Status ModelRepository::Load(const std::string& name) { return LoadModel(name, true); }

Status ModelRepository::LoadModel(const std::string& name, bool readmit) {
  CHORUS_RETURN_IF_ERROR(CheckModelName(name));
  const bool exists = layout_.HasModel(name);
  int quarantines = 0;
  {
    MutexLock lock(&mu_);
    if (!exists) {
      records_.erase(name);  // gone from the repository: no longer listed
      return NotFoundError("no model \"" + name + "\" in the repository");
    }
    Record& record = records_[name];
    if (!record.quarantine.empty()) {
      if (!readmit) return UnavailableError("model \"" + name + "\" " + record.quarantine);
      Log().warn("model {} re-admitted from quarantine by an explicit load", name);
      record.quarantine.clear();
    }
    quarantines = record.quarantines;
    if (record.state != ModelState::kReady) record.state = ModelState::kLoading;
  }
  LoadSteps(name);
  const std::string files = Fingerprint(name);
  StatusOr<std::shared_ptr<LoadedModel>> loaded = loader_.LoadNewest(name);
  std::shared_ptr<LoadedModel> replaced = Settle(name, loaded, quarantines);
  {
    MutexLock lock(&mu_);
    records_[name].files = files;
  }
  if (!loaded.ok()) {
    return Status(loaded.status().code(), WithoutRoot(loaded.status().message(), layout_.root()));
  }
  if (replaced == *loaded) {  // quarantined while it loaded: not served
    replaced->Drain(Clock::now());
    return UnavailableError("model \"" + name + "\" was quarantined while it loaded");
  }
  Log().info("model {} version {} loaded", name, (*loaded)->version());
  if (replaced) replaced->Drain(Clock::now() + options_.drain_timeout);
  return OkStatus();
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
      if (it == records_.end() || it->second.files != files[i]) changed.push_back(present[i]);
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

std::shared_ptr<LoadedModel> ModelRepository::Settle(
    const std::string& name, const StatusOr<std::shared_ptr<LoadedModel>>& loaded,
    int quarantines) {
  MutexLock lock(&mu_);
  Record& record = records_[name];
  if (loaded.ok() && record.quarantines != quarantines) {
    Log().error("model {} was quarantined while it loaded: not served", name);
    return *loaded;
  }
  if (!loaded.ok()) {
    Log().error("model {} not loaded: {}", name, loaded.status().ToString());
    // A failed reload keeps the version that was serving.
    if (record.serving == nullptr) {
      record.state = ModelState::kUnavailable;
      record.failure = WithoutRoot(loaded.status().ToString(), layout_.root());
    }
    return nullptr;
  }
  record.state = ModelState::kReady;
  record.failure.clear();
  return std::exchange(record.serving, *loaded);
}

Status ModelRepository::Unload(const std::string& name) {
  std::shared_ptr<LoadedModel> unloaded;
  {
    MutexLock lock(&mu_);
    auto it = records_.find(name);
    if (it == records_.end() || it->second.serving == nullptr) {
      // One that failed to load is taken out of service (its error forgotten).
      if (it != records_.end() && !it->second.failure.empty()) {
        it->second.failure.clear();
        return OkStatus();
      }
      return NotFoundError("model " + name + " is not loaded");
    }
    unloaded = std::exchange(it->second.serving, nullptr);
    it->second.state = ModelState::kUnavailable;
  }
  unloaded->Drain(Clock::now() + options_.drain_timeout);
  Log().info("model {} unloaded", name);
  return OkStatus();
}

void ModelRepository::Quarantine(const std::string& name, const std::string& why) {
  std::shared_ptr<LoadedModel> unloaded;
  {
    MutexLock lock(&mu_);
    Record& record = records_[name];
    record.quarantine = why;
    record.quarantines += 1;  // a load under way does not serve
    record.state = ModelState::kUnavailable;
    unloaded = std::exchange(record.serving, nullptr);
  }
  Log().error("model {} {}", name, why);
  if (unloaded) unloaded->Drain(Clock::now() + options_.drain_timeout);
}

StatusOr<PublishedVersion> ModelRepository::Publish(const std::string& name, int64_t version,
                                                    const RepositoryLayout::VersionWriter& write) {
  CHORUS_ASSIGN_OR_RETURN(PublishedVersion published, layout_.Publish(name, version, write));
  CHORUS_RETURN_IF_ERROR(Load(name));
  return published;
}

StatusOr<std::shared_ptr<LoadedModel>> ModelRepository::Find(const std::string& name,
                                                             const std::string& version) const {
  MutexLock lock(&mu_);
  auto it = records_.find(name);
  const Record* record = it == records_.end() ? nullptr : &it->second;
  if (record == nullptr || record->serving == nullptr) {
    if (record != nullptr && !record->quarantine.empty()) {
      return UnavailableError("model \"" + name + "\" " + record->quarantine);
    }
    // In the repository but not serving (Triton: UNAVAILABLE), with why.
    if (record != nullptr && !record->failure.empty()) {
      return UnavailableError("model \"" + name + "\" is not loaded: " + record->failure);
    }
    if (record != nullptr && record->state == ModelState::kLoading) {
      return UnavailableError("model \"" + name + "\" is being loaded");
    }
    return NotFoundError("unknown model \"" + name + "\"");
  }
  if (!version.empty() && version != record->serving->version()) {
    return NotFoundError("model \"" + name + "\" has no version \"" + version +
                         "\" loaded (serving version " + record->serving->version() + ")");
  }
  return record->serving;
}

std::vector<std::shared_ptr<LoadedModel>> ModelRepository::Loaded() const {
  MutexLock lock(&mu_);
  std::vector<std::shared_ptr<LoadedModel>> models;
  for (const auto& [name, record] : records_) {
    if (record.serving) models.push_back(record.serving);
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
  const std::vector<std::string> names = layout_.ModelNames();
  std::vector<RepositoryEntry> index;
  MutexLock lock(&mu_);
  for (const std::string& name : names) {
    auto it = records_.find(name);
    if (it == records_.end()) {
      index.push_back({name, "", ModelState::kUnavailable, "unloaded"});
      continue;
    }
    const Record& record = it->second;
    if (record.serving) {
      index.push_back({name, record.serving->version(), ModelState::kReady, ""});
    } else if (record.state == ModelState::kLoading) {
      index.push_back({name, "", ModelState::kLoading, "being loaded"});
    } else {
      const std::string& why = !record.failure.empty()      ? record.failure
                               : !record.quarantine.empty() ? record.quarantine
                                                            : std::string("unloaded");
      index.push_back({name, "", ModelState::kUnavailable, why});
    }
  }
  return index;
}

void ModelRepository::DrainAll(Clock::time_point deadline) {
  for (const auto& model : Loaded()) model->Drain(deadline);
}

}  // namespace chorus
