#include "server/process/src/change_relay.h"

#include <unistd.h>

#include <algorithm>

#include "chorus/common/logging.h"
#include "chorus/server/cell_control.h"

namespace chorus {
namespace {

const char* Verb(const ModelChange& change) {
  return change.kind == ModelChange::Kind::kLoad ? "load" : "unload";
}

}  // namespace

void ChangeRelay::Request(const Process& origin, int64_t id, ModelChange change,
                          const Processes& running) {
  Asked asked{origin.pid, id, std::move(change)};
  if (stopped_) {
    RemoveFile(asked.change.override_file);
    return Answer(asked, UnavailableError("the server is stopping"), running);
  }
  Log().info("supervisor: {} asks every serving process to {} model {}", origin.name,
             Verb(asked.change), asked.change.model);
  queued_.push_back(std::move(asked));
  StartNext(running);
}

void ChangeRelay::StartNext(const Processes& running) {
  while (!active_ && !queued_.empty()) {
    active_.emplace(Active{next_id_++, std::move(queued_.front()), {}, {}, {}});
    queued_.pop_front();
    active_->superseded = Record(active_->asked.change);
    const CellCommand apply = CellCommand::Apply(active_->id, active_->asked.change);
    for (const Process& process : running) {
      // A process still starting reads it once started: it must, since the
      // change is in no record it was given.
      if (Status sent = WriteCellCommand(process.control_fd, apply); !sent.ok()) {
        active_->failures.emplace_back(process.order, sent.Annotate(process.name));
      } else {
        active_->waiting.insert(process.pid);
      }
    }
    FinishIfDone(running);
  }
}

std::vector<std::string> ChangeRelay::Record(const ModelChange& change) {
  std::vector<std::string> superseded;
  std::vector<ModelChange>& changes = run_->model_changes;
  for (auto it = changes.begin(); it != changes.end();) {
    if (it->model != change.model) {
      ++it;
      continue;
    }
    if (!it->override_file.empty()) superseded.push_back(it->override_file);
    it = changes.erase(it);
  }
  changes.push_back(change);
  if (change.kind == ModelChange::Kind::kLoad && run_->quarantined.erase(change.model) > 0) {
    Log().info("supervisor: model {} is re-admitted by an explicit load", change.model);
  }
  return superseded;
}

void ChangeRelay::Applied(pid_t pid, int64_t id, const Status& status, const Processes& running) {
  if (!active_ || active_->id != id || active_->waiting.erase(pid) == 0) return;  // stale
  if (!status.ok()) {
    for (const Process& process : running) {
      if (process.pid == pid)
        active_->failures.emplace_back(process.order, status.Annotate(process.name));
    }
  }
  FinishIfDone(running);
}

void ChangeRelay::Gone(const Process& gone, const std::string& how, const Processes& running) {
  for (auto it = queued_.begin(); it != queued_.end();) {
    if (it->origin != gone.pid) {
      ++it;
      continue;
    }
    // Its caller saw the connection break: nothing was done for it.
    RemoveFile(it->change.override_file);
    it = queued_.erase(it);
  }
  if (active_ && active_->waiting.erase(gone.pid) > 0) {
    // The process that takes its place carries out what the record says.
    active_->failures.emplace_back(
        gone.order,
        UnavailableError(gone.name + ": its serving process died (" + how + ") before it would " +
                         Verb(active_->asked.change) + " model " + active_->asked.change.model));
    FinishIfDone(running);
  }
}

void ChangeRelay::Quarantined(const std::string& model) {
  std::vector<ModelChange>& changes = run_->model_changes;
  changes.erase(std::remove_if(changes.begin(), changes.end(),
                               [&](const ModelChange& change) { return change.model == model; }),
                changes.end());
}

void ChangeRelay::FinishIfDone(const Processes& running) {
  if (!active_ || !active_->waiting.empty()) return;
  Active done = std::move(*active_);
  active_.reset();
  std::stable_sort(done.failures.begin(), done.failures.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  const Status status = done.failures.empty() ? OkStatus() : done.failures.front().second;
  Log().info("supervisor: {} of model {}: {}", Verb(done.asked.change), done.asked.change.model,
             status.ok() ? "done in every serving process" : status.ToString());
  Answer(done.asked, status, running);
  // Every process that started with the replaced changes in its record has
  // carried this one out since (or died): their files are read no more.
  for (const std::string& file : done.superseded) RemoveFile(file);
  StartNext(running);
}

void ChangeRelay::Answer(const Asked& asked, const Status& status, const Processes& running) {
  for (const Process& process : running) {
    if (process.pid != asked.origin) continue;
    // One dying needs no answer.
    WriteCellCommand(process.control_fd, CellCommand::Answer(asked.request, status)).IgnoreError();
  }
}

void ChangeRelay::RemoveFile(const std::string& file) const {
  if (file.empty() || run_->changes_dir.empty()) return;
  ::unlink((run_->changes_dir + "/" + file).c_str());
}

}  // namespace chorus
