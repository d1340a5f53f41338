#include "server/process/src/supervisor_link.h"

#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "chorus/common/file_util.h"

namespace chorus {

void SupervisorLink::Request(ModelChange change, const ChangeOverride* override,
                             std::function<void(Status)> done) {
  const bool load = change.kind == ModelChange::Kind::kLoad;
  std::string what = std::string(load ? "load" : "unload") + " of model " + change.model;
  int64_t id;
  {
    MutexLock lock(&mu_);
    id = next_request_++;
  }
  if (load && override != nullptr) {
    // Named by process and request: no other process writes it.
    change.override_file = std::to_string(::getpid()) + "-" + std::to_string(id) + ".cbor";
    Status written = WriteFileAtomically(changes_dir_ + "/" + change.override_file,
                                         EncodeChangeOverride(*override));
    if (!written.ok()) return done(written.Annotate("cannot hand the load's override on"));
  }
  Status refused;
  {
    MutexLock lock(&mu_);
    if (failed_all_) {
      refused = failed_all_status_;
    } else {
      waiting_[id] = Waiting{std::move(done), Clock::now() + answer_timeout_, std::move(what)};
      done = nullptr;  // the waiting request's now
    }
  }
  if (refused.ok()) {
    MutexLock lock(&write_mu_);
    refused = WriteCellReport(control_fd_, CellReport::Request(id, change))
                  .Annotate("cannot ask the supervisor to have every serving process do it");
  }
  if (refused.ok()) return;
  if (!change.override_file.empty()) ::unlink((changes_dir_ + "/" + change.override_file).c_str());
  if (!done) done = Take(id);
  if (done) done(refused);
}

std::function<void(Status)> SupervisorLink::Take(int64_t id) {
  MutexLock lock(&mu_);
  auto found = waiting_.find(id);
  if (found == waiting_.end()) return nullptr;
  std::function<void(Status)> done = std::move(found->second.done);
  waiting_.erase(found);
  return done;
}

void SupervisorLink::Answered(int64_t id, const Status& status) {
  if (std::function<void(Status)> done = Take(id)) done(status);
}

SupervisorLink::Clock::time_point SupervisorLink::Expire() {
  std::vector<std::pair<std::function<void(Status)>, std::string>> expired;
  Clock::time_point next = Clock::time_point::max();
  {
    MutexLock lock(&mu_);
    const Clock::time_point now = Clock::now();
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->second.deadline > now) {
        next = std::min(next, it->second.deadline);
        ++it;
        continue;
      }
      expired.emplace_back(std::move(it->second.done), std::move(it->second.what));
      it = waiting_.erase(it);
    }
  }
  for (auto& [done, what] : expired) {
    done(DeadlineExceededError("the " + what + " in every serving process was not done within " +
                               std::to_string(answer_timeout_.count() / 1000) +
                               " s (it may still be under way)"));
  }
  return next;
}

void SupervisorLink::FailAll(const Status& status) {
  std::map<int64_t, Waiting> failed;
  {
    MutexLock lock(&mu_);
    failed.swap(waiting_);
    failed_all_ = true;
    failed_all_status_ = status;
  }
  for (auto& [id, waiting] : failed) waiting.done(status);
}

void SupervisorLink::Applied(int64_t id, const Status& status) {
  MutexLock lock(&write_mu_);
  // Not written: the supervisor is gone (this process ends) or counts it failed.
  WriteCellReport(control_fd_, CellReport::Applied(id, status)).IgnoreError();
}

uint64_t SupervisorLink::Arrived() {
  MutexLock lock(&mu_);
  return ++arrived_;
}

void SupervisorLink::Quarantined(const std::string& model, uint64_t number) {
  MutexLock lock(&mu_);
  quarantined_at_[model] = number;
}

bool SupervisorLink::QuarantinedSince(const std::string& model, uint64_t number) const {
  MutexLock lock(&mu_);
  auto found = quarantined_at_.find(model);
  return found != quarantined_at_.end() && found->second > number;
}

StatusOr<ChangeOverride> SupervisorLink::OverrideOf(const ModelChange& change) const {
  if (change.override_file.empty()) return ChangeOverride{};
  CHORUS_ASSIGN_OR_RETURN(std::string bytes, ReadFile(changes_dir_ + "/" + change.override_file));
  return DecodeChangeOverride(bytes);
}

}  // namespace chorus
