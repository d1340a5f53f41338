// The training service's operations with no transport (as InferenceCore is
// the inference protocol's): a job's lifecycle (build on this server, drive
// one across servers, join one as another host, resume after a restart,
// fail, delete) and its operations (step, save, load, evaluate, export),
// each run on this server and, for a job's driver, on its other hosts.
// Blocking: the service calls it off the reactors, on the shared background
// runner or on the job's own runner. Thread-safe.
#ifndef CHORUS_SERVER_TRAINING_TRAINING_CORE_H_
#define CHORUS_SERVER_TRAINING_TRAINING_CORE_H_

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/common/background_runner.h"
#include "chorus/interpreter/placement.h"
#include "chorus/package/signature.h"
#include "chorus/server/models/model_repository.h"
#include "chorus/server/rpc/authorizer.h"
#include "chorus/server/training/driver_watch.h"
#include "chorus/server/training/job_hosts.h"
#include "chorus/server/training/job_journal.h"
#include "chorus/server/training/job_registry.h"
#include "chorus/training/job/training_job.h"
#include "chorus/training/training_service.pb.h"

namespace chorus {

class TrainingCore {
 public:
  // What the core works with; every pointer outlives it.
  struct Context {
    InterpreterPlacement* placement;  // who holds which interpreter
    BackgroundRunner* background;     // tear-downs told to other hosts
    ModelRepository* repository;      // where Export publishes
    const Authorizer* authorizer;     // the token this server's calls to others carry
    // When set, jobs run only archives signed by one of these keys.
    std::shared_ptr<const TrustedKeys> trusted_keys;
    // Non-empty: jobs are refused, with this why (a server of several cells).
    std::string jobs_refused;
  };

  // `journal` records the jobs created with a checkpoint directory.
  TrainingCore(Context context, JobRegistry* jobs, JobJournal* journal);
  // Stop().
  ~TrainingCore();
  // Stops watching drivers. Call before the registry goes; idempotent.
  void Stop();

  // This server among the hosts of a job: a driver never joins itself.
  const std::string& instance_id() const { return instance_id_; }
  JobRegistry& jobs() { return *jobs_; }

  // Recreates the journal's jobs under their ids, each resuming from its
  // latest checkpoint, on the background runner; until one is built, calls
  // on it are UNAVAILABLE. A job in `quarantined` (id -> why) is not
  // recreated: calls on it answer why.
  Status ResumeJournaledJobs(const std::map<std::string, std::string>& quarantined);
  // Builds a job of a validated `spec` (across its hosts when it names
  // several) and publishes it.
  struct CreatedJob {
    std::string id;
    std::shared_ptr<JobEntry> entry;
  };
  StatusOr<CreatedJob> Create(const training::JobSpec& spec);
  // What JoinJob answers before the rendezvous: OK when this server can take
  // host `join.host()` of the job; check_only asks no more.
  Status CheckJoin(const training::JoinJobRequest& join) const;
  // Builds this server's part of a job another server drives and publishes
  // it; `cancelled` says whether the driver gave up meanwhile.
  StatusOr<std::shared_ptr<JobEntry>> Join(const training::JoinJobRequest& join,
                                           const std::function<bool()>& cancelled);
  // OK when a call on `entry` may run here: the job works and, for another
  // host's part, the call is its driver's (`driver_marker`: the call's
  // kDriverMetadata, "" if none).
  Status CheckCaller(const std::string& id, const JobEntry& entry,
                     const std::string& driver_marker) const;
  // Unpublishes job `id` (for TearDown): what DeleteJob checks and does at
  // once. nullptr for a held id that will not be resumed.
  StatusOr<std::shared_ptr<JobEntry>> Unpublish(const std::string& id,
                                                const std::string& driver_marker);
  // Tears an unpublished job down: its queued operations finish, its metric
  // streams end, its interpreters are freed, the journal forgets it, its other
  // hosts delete their parts.
  void TearDown(const std::string& id, std::shared_ptr<JobEntry> entry);

  // The operations, on the job's runner. Across servers, the driver's runs
  // on every host; an error that leaves them out of step fails the job.
  // `batch`: request.batch() decoded (the one step's tokens), if given.
  StatusOr<std::vector<StepMetrics>> Step(const std::string& id, JobEntry& entry,
                                          const training::StepRequest& request,
                                          const std::optional<at::Tensor>& batch,
                                          const StopConditions& stop);
  StatusOr<std::string> Save(const std::string& id, JobEntry& entry, const std::string& directory);
  StatusOr<int64_t> Load(const std::string& id, JobEntry& entry, const std::string& path);
  StatusOr<at::Tensor> Evaluate(const std::string& id, JobEntry& entry, const at::Tensor& tokens,
                                const training::EvaluateRequest& request);
  // Publishes the model as version `version` (0: the next) of `name` in the
  // repository, which then serves it. Returns the version and its file.
  StatusOr<std::pair<int64_t, std::string>> Export(const std::string& id, JobEntry& entry,
                                                   const training::ExportRequest& request);

 private:
  // Where a job's ranks are: this server alone, or host `host` of its spec's
  // hosts, met at `rendezvous` (`others`: the driver's view of the rest).
  struct Placement {
    int host = 0;
    std::shared_ptr<Rendezvous> rendezvous;
    std::string resume_from;
    std::shared_ptr<const JobHosts> others;
    std::string driver_instance;  // on another host than the driver
  };

  StatusOr<std::shared_ptr<JobEntry>> BuildJob(const std::string& id, const training::JobSpec& spec,
                                               const Placement& placement);
  StatusOr<TrainingJobOptions> JobOptions(const std::string& id, const training::JobSpec& spec,
                                          const Placement& placement) const;
  StatusOr<std::shared_ptr<JobEntry>> BuildAcrossHosts(const std::string& id,
                                                       const training::JobSpec& spec);
  // Runs `local` here and `remote` on the job's other hosts (when this is its
  // driver); an error that leaves them out of step fails the job.
  Status RunOnEveryHost(const std::string& id, JobEntry& entry,
                        const std::function<Status()>& local, const JobHosts::RemoteCall& remote);
  // Marks the job FAILED with `why` (once), frees its ranks here and asks its
  // other hosts to free theirs; returns the error the operation answers.
  Status FailJob(const std::string& id, JobEntry& entry, const Status& why);
  // Tears down an unpublished entry (a build that did not complete).
  void Discard(JobEntry& entry);

  const Context context_;
  JobRegistry* const jobs_;
  JobJournal* const journal_;
  const std::string instance_id_;
  DriverWatch watch_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_TRAINING_TRAINING_CORE_H_
