// chorus.training.TrainingService: training jobs on the server's interpreters,
// next to the models it serves. Handlers convert and hand off; job work
// (seconds to minutes) runs on each job's own background thread, never on a
// reactor.
#ifndef CHORUS_SERVER_TRAINING_TRAINING_SERVICE_H_
#define CHORUS_SERVER_TRAINING_TRAINING_SERVICE_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "chorus/common/background_runner.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/package/signature.h"
#include "chorus/server/models/model_repository.h"
#include "chorus/server/rpc/authorizer.h"
#include "chorus/server/training/job_hosts.h"
#include "chorus/server/training/job_journal.h"
#include "chorus/training/job/training_job.h"
#include "chorus/training/training_service.grpc.pb.h"

namespace chorus {

// A job and what serves it. Complete before the registry publishes it, and
// never emptied afterwards: whoever holds an entry may use its job and runner,
// even after the job was deleted (whose operations then fail).
struct JobEntry {
  JobEntry(std::string name, std::unique_ptr<TrainingJob> job,
           std::shared_ptr<const JobHosts> others = nullptr, std::string driver = "",
           std::string driver_instance = "")
      : name(std::move(name)),
        job(std::move(job)),
        others(std::move(others)),
        driver(std::move(driver)),
        driver_instance(std::move(driver_instance)) {}

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
  // Why the job FAILED (OK while it works).
  Status failure() const CHORUS_EXCLUDES(mu_);
  // Records the first failure; true for the one caller that recorded it.
  bool Fail(Status why) CHORUS_EXCLUDES(mu_);
  // True once: for whoever gives the job's interpreters back.
  bool TakeInterpreters() CHORUS_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  Status failure_ CHORUS_GUARDED_BY(mu_);
  bool interpreters_taken_ CHORUS_GUARDED_BY(mu_) = false;
};

// The server's jobs, and which interpreters they hold. Thread-safe.
class JobRegistry {
 public:
  explicit JobRegistry(InterpreterManager* manager) : manager_(manager) {}
  ~JobRegistry();

  // Interpreters for `ranks` ranks, distinct and held by no other job.
  // INVALID_ARGUMENT when there are not enough.
  StatusOr<std::vector<int>> Reserve(int ranks) CHORUS_EXCLUDES(mu_);
  // What Reserve(ranks) would answer now, reserving nothing.
  Status CheckFree(int ranks) const CHORUS_EXCLUDES(mu_);
  void Release(const std::vector<int>& interpreters) CHORUS_EXCLUDES(mu_);
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
  };
  // Every held id (jobs being resumed, or that could not be).
  std::map<std::string, HeldJob> ListHeld() const CHORUS_EXCLUDES(mu_);
  // Unpublishes the entry, which the caller tears down. A held id that will
  // not be resumed is forgotten (nullptr); NOT_FOUND, or UNAVAILABLE while
  // one is being resumed.
  StatusOr<std::shared_ptr<JobEntry>> Remove(const std::string& id) CHORUS_EXCLUDES(mu_);
  // Prometheus gauges of every job's last step.
  std::string RenderMetrics() const CHORUS_EXCLUDES(mu_);

 private:
  // Interpreters no job holds; INVALID_ARGUMENT when fewer than `ranks`.
  StatusOr<std::vector<int>> FreeLocked(int ranks) const CHORUS_REQUIRES(mu_);

  InterpreterManager* const manager_;
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<JobEntry>> jobs_ CHORUS_GUARDED_BY(mu_);
  std::map<std::string, HeldJob> held_ids_ CHORUS_GUARDED_BY(mu_);
  std::set<int> held_ CHORUS_GUARDED_BY(mu_);
};

class TrainingService final : public chorus::training::TrainingService::CallbackService {
 public:
  // What the service works with; every pointer outlives it.
  struct Context {
    const Authorizer* authorizer;
    InterpreterManager* manager;
    BackgroundRunner* background;  // builds and tear-downs, off the reactors
    ModelRepository* repository;   // where Export publishes
    std::string model_repository;  // its root
    // When set, jobs run only archives signed by one of these keys.
    std::shared_ptr<const TrustedKeys> trusted_keys;
  };
  // `journal` records the jobs created with a checkpoint directory.
  TrainingService(Context context, JobRegistry* jobs, JobJournal* journal);

  // Finishes the joins under way and stops watching the drivers of this
  // server's parts of jobs across servers (see JoinJob). Call before the
  // registry goes; idempotent.
  void Stop() CHORUS_EXCLUDES(watch_mu_);
  ~TrainingService() override;

  // Recreates the journal's jobs under their ids, each resuming from its
  // latest checkpoint, on the background runner; until one is built, calls
  // on it are UNAVAILABLE. A job in `quarantined` (id -> why) is not
  // recreated: calls on it answer why. Call before serving.
  Status ResumeJournaledJobs(const std::map<std::string, std::string>& quarantined);

  grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* ctx,
                                      const training::CreateJobRequest* request,
                                      training::CreateJobResponse* response) override;
  grpc::ServerUnaryReactor* Step(grpc::CallbackServerContext* ctx,
                                 const training::StepRequest* request,
                                 training::StepResponse* response) override;
  grpc::ServerUnaryReactor* SaveCheckpoint(grpc::CallbackServerContext* ctx,
                                           const training::SaveCheckpointRequest* request,
                                           training::SaveCheckpointResponse* response) override;
  grpc::ServerUnaryReactor* LoadCheckpoint(grpc::CallbackServerContext* ctx,
                                           const training::LoadCheckpointRequest* request,
                                           training::LoadCheckpointResponse* response) override;
  grpc::ServerUnaryReactor* Export(grpc::CallbackServerContext* ctx,
                                   const training::ExportRequest* request,
                                   training::ExportResponse* response) override;
  grpc::ServerUnaryReactor* Evaluate(grpc::CallbackServerContext* ctx,
                                     const training::EvaluateRequest* request,
                                     training::EvaluateResponse* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx,
                                     const training::GetStatsRequest* request,
                                     training::JobStats* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const training::ListJobsRequest* request,
                                     training::ListJobsResponse* response) override;
  grpc::ServerWriteReactor<training::StepMetrics>* StreamMetrics(
      grpc::CallbackServerContext* ctx, const training::StreamMetricsRequest* request) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx,
                                      const training::DeleteJobRequest* request,
                                      training::DeleteJobResponse* response) override;
  grpc::ServerUnaryReactor* JoinJob(grpc::CallbackServerContext* ctx,
                                    const training::JoinJobRequest* request,
                                    training::JoinJobResponse* response) override;

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

  // Finds the job and runs `work` on its thread, finishing the call with its
  // status; `work` gets the call's deadline and cancellation, and is not run
  // at all when the call ended while it waited for the job.
  grpc::ServerUnaryReactor* OnJob(grpc::CallbackServerContext* ctx, const std::string& job_id,
                                  std::function<Status(JobEntry&, const StopConditions&)> work);

  // Builds job `id` of `spec` on interpreters it reserves and records it in
  // the journal when it has a checkpoint directory (one server only); the
  // caller publishes it. Blocking.
  StatusOr<std::shared_ptr<JobEntry>> BuildJob(const std::string& id, const training::JobSpec& spec,
                                               const Placement& placement);
  // The driver's side of CreateJob for a job across servers: serves the
  // rendezvous, builds host 0 while every other host joins. Blocking.
  StatusOr<std::shared_ptr<JobEntry>> BuildAcrossHosts(const std::string& id,
                                                       const training::JobSpec& spec);
  // Runs an operation of a job: here, and on its other hosts when this is
  // its driver. An error that leaves the hosts out of step (a lost host, a
  // timeout, a failed collective) fails the job: FAILED, its ranks freed.
  Status OnEveryHost(const std::string& id, JobEntry& entry, const std::function<Status()>& local,
                     const JobHosts::RemoteCall& remote);
  // Marks the job FAILED with `why` (once), frees its ranks here and asks its
  // other hosts to free theirs; returns the error the operation answers.
  Status FailJob(const std::string& id, JobEntry& entry, const Status& why);
  // The watcher's thread: every second, asks each driver of a part of a job
  // across servers held here about it; a part whose driver no longer knows
  // the job, failed it, or has not answered for the job's collective timeout
  // fails (its ranks freed), so a lost driver never strands interpreters.
  void WatchDrivers() CHORUS_EXCLUDES(watch_mu_);
  // A job across servers takes calls on its other hosts from its driver only.
  Status CheckCaller(const grpc::CallbackServerContext& ctx, const std::string& id,
                     const JobEntry& entry) const;

  const Context context_;
  JobRegistry* const jobs_;
  JobJournal* const journal_;
  // This server, among the hosts of a job: a driver never joins itself.
  const std::string instance_id_;

  // Joins wait for their whole job to meet: on their own thread, so that a
  // join never waits behind this server's own CreateJob (two servers driving
  // jobs on each other would otherwise each wait for the other).
  BackgroundRunner joins_;
  Mutex watch_mu_;
  CondVar watch_changed_;
  bool stop_watching_ CHORUS_GUARDED_BY(watch_mu_) = false;
  std::thread watcher_ CHORUS_GUARDED_BY(watch_mu_);  // started by the first JoinJob
};

}  // namespace chorus

#endif  // CHORUS_SERVER_TRAINING_TRAINING_SERVICE_H_
