#include "chorus/server/training/job_registry.h"

#include <utility>

namespace chorus {
namespace {

constexpr std::pair<JobState, const char*> kJobStateNames[] = {
    {JobState::kResuming, "RESUMING"},
    {JobState::kReady, "READY"},
    {JobState::kFailed, "FAILED"},
};

}  // namespace

const char* JobStateName(JobState state) {
  for (const auto& [known, name] : kJobStateNames) {
    if (known == state) return name;
  }
  return "UNKNOWN";
}

std::optional<JobState> JobStateByName(std::string_view name) {
  for (const auto& [state, known] : kJobStateNames) {
    if (name == known) return state;
  }
  return std::nullopt;
}

JobEntry::JobEntry(std::string name, std::unique_ptr<TrainingJob> job, InterpreterLease ranks,
                   std::shared_ptr<const JobHosts> others, std::string driver,
                   std::string driver_instance)
    : name(std::move(name)),
      job(std::move(job)),
      others(std::move(others)),
      driver(std::move(driver)),
      driver_instance(std::move(driver_instance)),
      ranks_(std::move(ranks)) {}

JobState JobEntry::state() const {
  MutexLock lock(&mu_);
  return failure_.ok() ? JobState::kReady : JobState::kFailed;
}

Status JobEntry::failure() const {
  MutexLock lock(&mu_);
  return failure_;
}

bool JobEntry::Fail(Status why) {
  MutexLock lock(&mu_);
  if (!failure_.ok()) return false;
  failure_ = std::move(why);
  return true;
}

void JobEntry::ReleaseInterpreters() {
  MutexLock lock(&mu_);
  ranks_.Release();
}

JobRegistry::~JobRegistry() {
  std::map<std::string, std::shared_ptr<JobEntry>> jobs;
  {
    MutexLock lock(&mu_);
    jobs.swap(jobs_);
  }
  for (auto& [id, entry] : jobs) entry->runner.Stop();
}

void JobRegistry::Hold(const std::string& id, const std::string& name, Status why) {
  MutexLock lock(&mu_);
  held_ids_[id] = HeldJob{name, std::move(why)};
}

void JobRegistry::Add(const std::string& id, std::shared_ptr<JobEntry> entry) {
  MutexLock lock(&mu_);
  held_ids_.erase(id);
  jobs_[id] = std::move(entry);
}

StatusOr<std::shared_ptr<JobEntry>> JobRegistry::Find(const std::string& id) const {
  MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it != jobs_.end()) return it->second;
  if (auto held = held_ids_.find(id); held != held_ids_.end()) return held->second.why;
  return NotFoundError("no training job \"" + id + "\"");
}

std::map<std::string, std::shared_ptr<JobEntry>> JobRegistry::List() const {
  MutexLock lock(&mu_);
  return jobs_;
}

std::map<std::string, JobRegistry::HeldJob> JobRegistry::ListHeld() const {
  MutexLock lock(&mu_);
  return held_ids_;
}

StatusOr<std::shared_ptr<JobEntry>> JobRegistry::Remove(const std::string& id) {
  MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it != jobs_.end()) {
    auto entry = std::move(it->second);
    jobs_.erase(it);
    return entry;
  }
  if (auto held = held_ids_.find(id); held != held_ids_.end()) {
    if (held->second.why.code() == StatusCode::kUnavailable) return held->second.why;
    held_ids_.erase(held);
    return std::shared_ptr<JobEntry>();
  }
  return NotFoundError("no training job \"" + id + "\"");
}

}  // namespace chorus
