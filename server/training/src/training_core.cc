// TrainingCore: a job's lifecycle (the operations are in job_operations.cc).
#include "chorus/server/training/training_core.h"

#include <unistd.h>

#include <cstdio>
#include <random>
#include <utility>

#include "chorus/common/logging.h"
#include "chorus/server/training/job_proto.h"

namespace chorus {
namespace {

std::string NewInstanceId() {
  std::random_device random;
  char id[24];
  std::snprintf(id, sizeof(id), "%08x%08x", random(), random());
  return id;
}

}  // namespace

TrainingCore::TrainingCore(Context context, JobRegistry* jobs, JobJournal* journal)
    : context_(std::move(context)),
      jobs_(jobs),
      journal_(journal),
      instance_id_(NewInstanceId()),
      watch_(jobs, context_.authorizer,
             [this](const std::string& id, std::shared_ptr<JobEntry> entry, const Status& why) {
               (void)entry->runner.Post([this, id, entry, why] {
                 FailJob(id, *entry, why).IgnoreError();
               });  // false: being deleted
             }) {}

TrainingCore::~TrainingCore() { Stop(); }

void TrainingCore::Stop() { watch_.Stop(); }

StatusOr<TrainingJobOptions> TrainingCore::JobOptions(const std::string& id,
                                                      const training::JobSpec& spec,
                                                      const Placement& placement) const {
  StatusOr<std::shared_ptr<Archive>> archive = Archive::Open(spec.archive());
  if (!archive.ok()) return InvalidArgumentError("spec.archive: " + archive.status().message());
  if (context_.trusted_keys) CHORUS_RETURN_IF_ERROR(context_.trusted_keys->Verify(**archive));
  TrainingJobOptions options;
  options.id = id;
  options.archive = *archive;
  options.spec = SpecFromProto(spec);
  options.dp = std::max(1, spec.dp_shard());
  options.tp = std::max(1, spec.tp());
  options.metrics_log = spec.metrics_log();
  options.checkpoint_dir = spec.checkpoint_dir();
  options.checkpoint_interval = spec.checkpoint_interval();
  options.collective_timeout = CollectiveTimeout(spec);
  if (spec.hosts_size() > 1) {
    options.hosts = spec.hosts_size();
    options.host = placement.host;
    options.rendezvous = placement.rendezvous;
    options.gloo_host = HostOfAddress(spec.hosts(placement.host));
    options.layout = spec.layout().empty() ? "fsdp" : spec.layout();
    options.resume_from = placement.resume_from;
    options.resume_latest = false;  // the driver says where every host resumes
  }
  return options;
}

StatusOr<std::shared_ptr<JobEntry>> TrainingCore::BuildJob(const std::string& id,
                                                           const training::JobSpec& spec,
                                                           const Placement& placement) {
  StatusOr<InterpreterLease> ranks =
      context_.placement->HoldExclusive(RanksOf(spec), "training job " + id);
  if (!ranks.ok())
    return Status(ranks.status().code(), "dp_shard x tp = " + ranks.status().message());
  CHORUS_ASSIGN_OR_RETURN(TrainingJobOptions options, JobOptions(id, spec, placement));
  options.interpreters = ranks->interpreters();
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<TrainingJob> job,
                          TrainingJob::Create(context_.placement->manager(), options));
  const bool across_hosts = spec.hosts_size() > 1;
  if (!spec.checkpoint_dir().empty() && !across_hosts) {
    if (Status recorded = journal_->Put(id, spec); !recorded.ok()) {
      job->Shutdown();
      return recorded.Annotate("cannot record the job to resume it after a crash");
    }
  }
  auto entry = std::make_shared<JobEntry>(spec.name(), std::move(job), std::move(*ranks),
                                          placement.others, placement.host > 0 ? spec.hosts(0) : "",
                                          placement.driver_instance);
  Log().info("training job {} ({}): dp {} x tp {} on interpreters {}{}, at step {}", id,
             spec.name(), options.dp, options.tp, fmt::join(options.interpreters, ", "),
             across_hosts ? ", host " + std::to_string(placement.host) + " of " +
                                std::to_string(spec.hosts_size())
                          : "",
             entry->job->CurrentStep());
  return entry;
}

StatusOr<std::shared_ptr<JobEntry>> TrainingCore::BuildAcrossHosts(const std::string& id,
                                                                   const training::JobSpec& spec) {
  const std::chrono::milliseconds timeout = CollectiveTimeout(spec);
  const std::string rendezvous_host = HostOfAddress(spec.hosts(0));
  StatusOr<std::shared_ptr<Rendezvous>> rendezvous =
      Rendezvous::Connect(rendezvous_host, spec.rendezvous_port(), /*serve=*/true, timeout);
  if (!rendezvous.ok()) return rendezvous.status().Annotate("serving the job's rendezvous");
  Placement placement;
  placement.rendezvous = *rendezvous;
  placement.others =
      std::make_shared<JobHosts>(std::vector<std::string>(spec.hosts().begin(), spec.hosts().end()),
                                 instance_id_, context_.authorizer->token(), timeout);
  if (!spec.checkpoint_dir().empty()) {
    placement.resume_from = TrainingJob::LatestCheckpoint(spec.checkpoint_dir());
  }
  auto ask = [&](bool check_only) {
    return [&, check_only](int host, JobHosts::Stub& stub, grpc::ClientContext& context) {
      training::JoinJobRequest request;
      request.set_job_id(id);
      *request.mutable_spec() = spec;
      request.set_host(host);
      request.set_rendezvous_host(rendezvous_host);
      request.set_rendezvous_port((*rendezvous)->port());
      request.set_driver_instance(instance_id_);
      request.set_resume_from(check_only ? "" : placement.resume_from);
      request.set_check_only(check_only);
      training::JoinJobResponse response;
      return stub.JoinJob(&context, request, &response);
    };
  };
  const std::string what =
      "creating training job " + id + " across " + std::to_string(spec.hosts_size()) + " servers";
  // A host that cannot join says so now, not after the rendezvous timeout.
  Status can = context_.placement->CheckExclusive(RanksOf(spec));
  if (can.ok()) can = placement.others->RunOnOthers(ask(true), std::chrono::seconds(30));
  if (!can.ok()) return can.Annotate(what);
  StatusOr<std::shared_ptr<JobEntry>> built = InternalError("not built");
  Status joined = placement.others->Run(
      [&] {
        built = BuildJob(id, spec, placement);
        return built.status();
      },
      ask(false));
  if (joined.ok()) return built;
  // Whoever did join frees its ranks again.
  if (built.ok()) Discard(**built);
  (void)placement.others->DeleteOnOthers(id, std::chrono::seconds(5));
  return joined.Annotate(what);
}

void TrainingCore::Discard(JobEntry& entry) {
  entry.job->Shutdown();
  entry.ReleaseInterpreters();
}

StatusOr<TrainingCore::CreatedJob> TrainingCore::Create(const training::JobSpec& spec) {
  if (!context_.jobs_refused.empty()) return FailedPreconditionError(context_.jobs_refused);
  StatusOr<std::string> id = journal_->NewId();
  if (!id.ok()) return id.status().Annotate("cannot record a new job id");
  const bool across_hosts = spec.hosts_size() > 1;
  // Unique on every host of the job, not only here.
  if (across_hosts) *id += "-" + instance_id_.substr(0, 8);
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<JobEntry> entry,
                          across_hosts ? BuildAcrossHosts(*id, spec) : BuildJob(*id, spec, {}));
  jobs_->Add(*id, entry);
  return CreatedJob{*id, entry};
}

Status TrainingCore::ResumeJournaledJobs(const std::map<std::string, std::string>& quarantined) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<JobJournal::Entry> recorded, journal_->Open());
  for (JobJournal::Entry& entry : recorded) {
    const std::string& id = entry.id;
    const std::string checkpoints = entry.spec.checkpoint_dir();
    if (auto it = quarantined.find(id); it != quarantined.end()) {
      Log().error("training job {} is not resumed: {}; its checkpoints stay in {}", id, it->second,
                  checkpoints);
      jobs_->Hold(id, entry.spec.name(),
                  FailedPreconditionError("training job " + id + " was not resumed: " + it->second +
                                          "; its checkpoints are in " + checkpoints));
      if (Status removed = journal_->Remove(id); !removed.ok()) {
        Log().warn("training job {}: {}", id, removed.ToString());
      }
      continue;
    }
    jobs_->Hold(
        id, entry.spec.name(),
        UnavailableError("training job " + id + " is being resumed from its checkpoint; retry"));
    const bool posted = context_.background->Post([this, id, spec = std::move(entry.spec)] {
      StatusOr<std::shared_ptr<JobEntry>> job = BuildJob(id, spec, Placement{});
      if (job.ok()) return jobs_->Add(id, *job);
      Log().error("training job {} could not be resumed: {}", id, job.status().ToString());
      jobs_->Hold(id, spec.name(),
                  FailedPreconditionError("training job " + id +
                                          " could not be resumed: " + job.status().message() +
                                          "; its checkpoints are in " + spec.checkpoint_dir()));
      journal_->Remove(id).IgnoreError();
    });
    if (!posted) return UnavailableError("the server is shutting down");
  }
  return OkStatus();
}

Status TrainingCore::CheckJoin(const training::JoinJobRequest& join) const {
  if (!context_.jobs_refused.empty()) return FailedPreconditionError(context_.jobs_refused);
  const training::JobSpec& spec = join.spec();
  CHORUS_RETURN_IF_ERROR(ValidateJobSpec(spec));
  const int host = join.host();
  if (spec.hosts_size() < 2 || host < 1 || host >= spec.hosts_size()) {
    return InvalidArgumentError("JoinJob: host " + std::to_string(host) + " of a job on " +
                                std::to_string(spec.hosts_size()) +
                                " hosts (the driver is host 0)");
  }
  if (join.driver_instance() == instance_id_) {
    return InvalidArgumentError("hosts[" + std::to_string(host) + "] (" + spec.hosts(host) +
                                ") is the driver itself: list every server once, "
                                "the one called first");
  }
  if (jobs_->Find(join.job_id()).ok()) {
    return Status(StatusCode::kAlreadyExists,
                  "training job " + join.job_id() + " exists on this server");
  }
  if (!join.check_only()) return OkStatus();
  if (Status free = context_.placement->CheckExclusive(RanksOf(spec)); !free.ok()) {
    return Status(free.code(), "dp_shard x tp = " + free.message());
  }
  if (::access(spec.archive().c_str(), R_OK) != 0) {
    return InvalidArgumentError("spec.archive: cannot read " + spec.archive() + " here");
  }
  return OkStatus();
}

StatusOr<std::shared_ptr<JobEntry>> TrainingCore::Join(const training::JoinJobRequest& join,
                                                       const std::function<bool()>& cancelled) {
  watch_.Start();
  StatusOr<std::shared_ptr<Rendezvous>> rendezvous =
      Rendezvous::Connect(join.rendezvous_host(), join.rendezvous_port(), /*serve=*/false,
                          CollectiveTimeout(join.spec()));
  if (!rendezvous.ok()) {
    return rendezvous.status().Annotate("reaching the driver's rendezvous at " +
                                        join.rendezvous_host() + ":" +
                                        std::to_string(join.rendezvous_port()));
  }
  Placement placement;
  placement.host = join.host();
  placement.rendezvous = *rendezvous;
  placement.resume_from = join.resume_from();
  placement.driver_instance = join.driver_instance();
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<JobEntry> entry,
                          BuildJob(join.job_id(), join.spec(), placement));
  if (cancelled()) {
    // The driver gave up (its own part failed): nobody will drive this one.
    Discard(*entry);
    return Status(StatusCode::kCancelled, "the driver cancelled the join");
  }
  jobs_->Add(join.job_id(), entry);
  return entry;
}

Status TrainingCore::CheckCaller(const std::string& id, const JobEntry& entry,
                                 const std::string& driver_marker) const {
  if (Status failure = entry.failure(); !failure.ok()) return failure;
  if (entry.driver.empty() || driver_marker == entry.driver_instance) return OkStatus();
  return FailedPreconditionError("training job " + id + " spans servers: call its driver, " +
                                 entry.driver);
}

Status TrainingCore::FailJob(const std::string& id, JobEntry& entry, const Status& why) {
  const std::string checkpoints = entry.job->options().checkpoint_dir;
  // `latest` is on the driver's disk; another host's may hold only its parts.
  std::string resume;
  if (!entry.driver.empty()) {
    resume = "its driver " + entry.driver + " names its last checkpoint";
  } else if (std::string latest =
                 checkpoints.empty() ? "" : TrainingJob::LatestCheckpoint(checkpoints);
             !latest.empty()) {
    resume = "its last checkpoint is " + checkpoints + "/" + latest +
             ": a new job with the same checkpoint_dir resumes from it";
  } else {
    resume = "it has no checkpoint";
  }
  const Status failed(why.code(), "training job " + id + " failed (its ranks are freed; " + resume +
                                      "): " + why.message());
  if (!entry.Fail(FailedPreconditionError(failed.message()))) return failed;
  Log().error("{}", failed.message());
  Discard(entry);
  if (entry.others) {
    // The other hosts' collectives fail too; freeing theirs now is a courtesy,
    // after this answer (a host cut off would hold it for the call's timeout).
    (void)context_.background->Post([others = entry.others, id] {
      Status told = others->DeleteOnOthers(id, std::chrono::seconds(5));
      if (!told.ok())
        Log().warn("training job {}: telling the other hosts: {}", id, told.ToString());
    });
  }
  return failed;
}

StatusOr<std::shared_ptr<JobEntry>> TrainingCore::Unpublish(const std::string& id,
                                                            const std::string& driver_marker) {
  if (StatusOr<std::shared_ptr<JobEntry>> found = jobs_->Find(id); found.ok()) {
    // Another host's part of a job across servers goes with the job, unless it failed.
    Status caller = CheckCaller(id, **found, driver_marker);
    if (!caller.ok() && (*found)->state() != JobState::kFailed) return caller;
  }
  return jobs_->Remove(id);
}

void TrainingCore::TearDown(const std::string& id, std::shared_ptr<JobEntry> entry) {
  // Not recreated after a restart from now on (its checkpoints stay).
  if (Status forgotten = journal_->Remove(id); !forgotten.ok()) {
    Log().warn("training job {}: {}", id, forgotten.ToString());
  }
  if (!entry) return;                           // one that could not be resumed
  entry->runner.Stop();                         // finishes queued operations
  entry->job->Close(std::chrono::seconds(10));  // ends metric streams
  Discard(*entry);                              // frees its interpreters' state
  if (entry->others && entry->state() != JobState::kFailed) {
    Status told = entry->others->DeleteOnOthers(id, std::chrono::seconds(10));
    if (!told.ok())
      Log().warn("training job {}: deleting it on the other hosts: {}", id, told.ToString());
  }
}

}  // namespace chorus
