#include "chorus/server/training/job_journal.h"

#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "chorus/common/file_util.h"
#include "chorus/common/numbers.h"

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
  // Typed lookups only: nlohmann's value() throws on a field of another type.
  auto field = [&](const char* key) {
    return journal.is_object() && journal.contains(key) ? journal[key] : nlohmann::json();
  };
  if (!field("format").is_string() || field("format").get<std::string>() != kFormat) {
    return corrupt("no \"format\": \"chorus-jobs\"");
  }
  if (!field("format_version").is_number_integer() ||
      field("format_version").get<int64_t>() != kFormatVersion) {
    return corrupt("format_version is not " + std::to_string(kFormatVersion));
  }
  const nlohmann::json jobs = field("jobs").is_null() ? nlohmann::json::object() : field("jobs");
  if (!jobs.is_object()) return corrupt("\"jobs\" is not an object");
  MutexLock lock(&mu_);
  if (field("next_id").is_number_integer()) {
    next_id_ = std::max<int64_t>(next_id_, field("next_id").get<int64_t>());
  }
  for (const auto& [id, spec_json] : jobs.items()) {
    if (id.rfind("job-", 0) == 0) {
      std::optional<int64_t> number = ParseNonNegativeInt64(id.substr(4));
      if (number && *number == std::numeric_limits<int64_t>::max()) {
        next_id_ = *number;  // the counter is used up: NewId refuses
      } else if (number) {
        next_id_ = std::max<int64_t>(next_id_, *number + 1);
      }
    }
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

StatusOr<std::string> JobJournal::NewId() {
  MutexLock lock(&mu_);
  if (next_id_ == std::numeric_limits<int64_t>::max()) {
    return ResourceExhaustedError("job journal " + path_ + ": every job id up to job-" +
                                  std::to_string(next_id_) + " is used");
  }
  const std::string id = "job-" + std::to_string(next_id_++);
  if (!path_.empty()) CHORUS_RETURN_IF_ERROR(WriteLocked());
  return id;
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
  const nlohmann::json journal = {{"format", kFormat},
                                  {"format_version", kFormatVersion},
                                  {"next_id", next_id_},
                                  {"jobs", jobs}};
  return WriteFileAtomically(path_, journal.dump(2) + "\n").Annotate("job journal " + path_);
}

}  // namespace chorus
