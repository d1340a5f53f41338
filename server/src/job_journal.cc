#include "server/src/job_journal.h"

#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "chorus/common/file_util.h"

namespace chorus {
namespace {

constexpr char kFormat[] = "chorus-jobs";
constexpr int kFormatVersion = 1;

}  // namespace

StatusOr<std::vector<JobJournal::Entry>> JobJournal::Open() {
  std::vector<Entry> entries;
  struct stat st;
  if (path_.empty() || ::stat(path_.c_str(), &st) != 0) return entries;
  CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFile(path_));
  const nlohmann::json journal = nlohmann::json::parse(text, nullptr, false);
  auto corrupt = [&](const std::string& why) {
    return DataLossError(path_ + " is not a chorus job journal: " + why);
  };
  if (!journal.is_object() || journal.value("format", "") != kFormat) {
    return corrupt("no \"format\": \"chorus-jobs\"");
  }
  if (journal.value("format_version", 0) != kFormatVersion) {
    return corrupt("format_version is not " + std::to_string(kFormatVersion));
  }
  const nlohmann::json jobs = journal.value("jobs", nlohmann::json::object());
  if (!jobs.is_object()) return corrupt("\"jobs\" is not an object");
  MutexLock lock(&mu_);
  for (const auto& [id, spec_json] : jobs.items()) {
    Entry entry{id, {}};
    if (!google::protobuf::util::JsonStringToMessage(spec_json.dump(), &entry.spec).ok()) {
      return corrupt("job " + id + " has no valid JobSpec");
    }
    jobs_[id] = entry.spec;
    entries.push_back(std::move(entry));
  }
  return entries;
}

Status JobJournal::Put(const std::string& id, const training::JobSpec& spec) {
  if (path_.empty()) return OkStatus();
  MutexLock lock(&mu_);
  jobs_[id] = spec;
  return WriteLocked();
}

Status JobJournal::Remove(const std::string& id) {
  if (path_.empty()) return OkStatus();
  MutexLock lock(&mu_);
  if (jobs_.erase(id) == 0) return OkStatus();
  return WriteLocked();
}

Status JobJournal::WriteLocked() {
  nlohmann::json jobs = nlohmann::json::object();
  for (const auto& [id, spec] : jobs_) {
    std::string json;
    if (!google::protobuf::util::MessageToJsonString(spec, &json).ok()) {
      return InternalError("cannot write job " + id + "'s spec as JSON");
    }
    jobs[id] = nlohmann::json::parse(json);
  }
  const nlohmann::json journal = {
      {"format", kFormat}, {"format_version", kFormatVersion}, {"jobs", jobs}};
  return WriteFileAtomically(path_, journal.dump(2) + "\n").Annotate("job journal " + path_);
}

}  // namespace chorus
