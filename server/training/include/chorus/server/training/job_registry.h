// The server's training jobs: each job's entry (the job, its interpreters,
// its place among the hosts of a job across servers, the runner of its
// operations, its state) and the registry that publishes entries under their
// ids.
#ifndef CHORUS_SERVER_TRAINING_JOB_REGISTRY_H_
#define CHORUS_SERVER_TRAINING_JOB_REGISTRY_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "chorus/common/background_runner.h"
#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/placement.h"
#include "chorus/server/training/job_hosts.h"
#include "chorus/training/job/training_job.h"

namespace chorus {

// Where a job is in its life (JobStats.state).
enum class JobState {
  kResuming,  // a job of an earlier serving process, being built again
  kReady,     // takes operations
  kFailed,    // an operation broke it, or it could not be resumed: its ranks are freed
};

// "RESUMING", "READY", "FAILED": the one conversion to and from the protocol's text.
const char* JobStateName(JobState state);
std::optional<JobState> JobStateByName(std::string_view name);

// A job and what serves it. Complete before the registry publishes it, and
// never emptied afterwards: whoever holds an entry may use its job and runner,
// even after the job was deleted (whose operations then fail).
struct JobEntry {
  JobEntry(std::string name, std::unique_ptr<TrainingJob> job, InterpreterLease ranks,
           std::shared_ptr<const JobHosts> others = nullptr, std::string driver = "",
           std::string driver_instance = "");

  const std::string name;
  const std::unique_ptr<TrainingJob> job;
  // A job across servers: on its driver, the other hosts, which run each of
  // its operations too; on another host, the driver's address (only the
  // driver's calls are taken there).
  const std::shared_ptr<const JobHosts> others;
  const std::string driver;
  const std::string driver_instance;  // the driver's calls carry it (kDriverMetadata)
  BackgroundRunner runner;            // the job's operations, in order; stopped on delete

  bool spans_hosts() const { return others != nullptr || !driver.empty(); }
  // kReady, or kFailed once Fail has been called.
  JobState state() const CHORUS_EXCLUDES(mu_);
  // Why the job failed (OK while it works).
  Status failure() const CHORUS_EXCLUDES(mu_);
  // Records the first failure; true for the one caller that recorded it.
  bool Fail(Status why) CHORUS_EXCLUDES(mu_);
  // Gives the job's interpreters back (the first call does; any thread).
  void ReleaseInterpreters() CHORUS_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  Status failure_ CHORUS_GUARDED_BY(mu_);
  InterpreterLease ranks_ CHORUS_GUARDED_BY(mu_);
};

// The server's jobs by id, and the ids of jobs not built (yet). Thread-safe.
class JobRegistry {
 public:
  JobRegistry() = default;
  // Stops every job's runner (so that no entry is last released on its own
  // runner's thread, which cannot join itself).
  ~JobRegistry();

  // Reserves `id` (a job of an earlier serving process) for a job not built
  // yet: calls on it answer `why` (UNAVAILABLE while it is being resumed, an
  // error when it cannot be) until Add replaces it.
  void Hold(const std::string& id, const std::string& name, Status why) CHORUS_EXCLUDES(mu_);
  // Publishes a complete entry under an id from JobJournal::NewId or Hold.
  void Add(const std::string& id, std::shared_ptr<JobEntry> entry) CHORUS_EXCLUDES(mu_);
  // The job; NOT_FOUND, or what Hold said for a held id.
  StatusOr<std::shared_ptr<JobEntry>> Find(const std::string& id) const CHORUS_EXCLUDES(mu_);
  // Every published job, by id.
  std::map<std::string, std::shared_ptr<JobEntry>> List() const CHORUS_EXCLUDES(mu_);
  // A job not built (yet): its name, and what calls on it answer.
  struct HeldJob {
    std::string name;
    Status why;
    JobState state() const {
      return why.code() == StatusCode::kUnavailable ? JobState::kResuming : JobState::kFailed;
    }
  };
  // Every held id (jobs being resumed, or that could not be).
  std::map<std::string, HeldJob> ListHeld() const CHORUS_EXCLUDES(mu_);
  // Unpublishes the entry, which the caller tears down. A held id that will
  // not be resumed is forgotten (nullptr); NOT_FOUND, or UNAVAILABLE while
  // one is being resumed.
  StatusOr<std::shared_ptr<JobEntry>> Remove(const std::string& id) CHORUS_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<JobEntry>> jobs_ CHORUS_GUARDED_BY(mu_);
  std::map<std::string, HeldJob> held_ids_ CHORUS_GUARDED_BY(mu_);
};

}  // namespace chorus

#endif  // CHORUS_SERVER_TRAINING_JOB_REGISTRY_H_
