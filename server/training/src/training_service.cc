#include "chorus/server/training/training_service.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <random>
#include <sstream>

#include "chorus/common/file_util.h"
#include "chorus/common/logging.h"
#include "chorus/common/numbers.h"
#include "chorus/package/model.h"
#include "chorus/server/models/metrics.h"
#include "chorus/server/models/model_repository.h"
#include "chorus/server/models/tensor_codec.h"
#include "chorus/server/rpc/grpc_call.h"
#include "chorus/server/rpc/grpc_status.h"

namespace chorus {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx, const Status& status) {
  return FinishCall(ctx, status);
}

StatusOr<at::Tensor> FromProto(const training::Tensor& tensor) {
  return TensorFromRaw(tensor.datatype(),
                       std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end()),
                       tensor.raw());
}

void ToProto(const at::Tensor& tensor, training::Tensor* out) {
  at::Tensor t = tensor.contiguous().to(at::kFloat);
  out->set_datatype("FP32");
  for (int64_t d : t.sizes()) out->add_shape(d);
  out->set_raw(t.data_ptr(), t.numel() * t.element_size());
}

void ToProto(const std::string& job, const StepMetrics& m, training::StepMetrics* out) {
  out->set_job_id(job);
  out->set_step(m.step);
  out->set_loss(m.loss);
  out->set_lr(m.lr);
  out->set_step_seconds(m.step_seconds);
  out->set_tokens_per_second(m.tokens_per_second);
  out->set_tokens_per_second_per_rank(m.tokens_per_second_per_rank);
  out->set_mfu_pct(m.mfu_pct);
  out->set_memory_mib(m.memory_mib);
  out->set_cross_host_bytes_per_host(m.cross_host_bytes);
}

// The request's spec: its fields where set, the spec's defaults elsewhere
// (proto3 reads an unset number as 0; where 0 is a value the field is optional).
TrainingSpec SpecOf(const training::JobSpec& from) {
  TrainingSpec spec;
  auto set = [](const std::string& value, std::string* to) {
    if (!value.empty()) *to = value;
  };
  auto positive = [](auto value, auto* to) {
    if (value > 0) *to = value;
  };
  set(from.model_factory(), &spec.model_factory);
  set(from.model_config_json(), &spec.model_config_json);
  set(from.loss(), &spec.loss);
  const training::OptimizerConfig& opt = from.optimizer();
  set(opt.name(), &spec.optimizer.name);
  positive(opt.lr(), &spec.optimizer.lr);
  positive(opt.beta1(), &spec.optimizer.beta1);
  positive(opt.beta2(), &spec.optimizer.beta2);
  positive(opt.eps(), &spec.optimizer.eps);
  if (opt.has_weight_decay()) spec.optimizer.weight_decay = opt.weight_decay();
  const training::LrSchedule& schedule = from.lr_schedule();
  set(schedule.kind(), &spec.lr_schedule.kind);
  positive(schedule.warmup_steps(), &spec.lr_schedule.warmup_steps);
  positive(schedule.total_steps(), &spec.lr_schedule.total_steps);
  if (schedule.has_min_lr_ratio()) spec.lr_schedule.min_lr_ratio = schedule.min_lr_ratio();
  spec.seed = from.seed();
  set(from.parallelize(), &spec.parallelize);
  set(from.data_loader(), &spec.data_loader);
  positive(from.global_batch(), &spec.global_batch);
  positive(from.seq_len(), &spec.seq_len);
  set(from.param_dtype(), &spec.param_dtype);
  spec.devices.assign(from.devices().begin(), from.devices().end());
  return spec;
}

// A job across servers: every host named once, with a port; a layout.
Status ValidateHosts(const training::JobSpec& spec) {
  const std::string& layout = spec.layout();
  if (!layout.empty() && layout != "fsdp" && layout != "hsdp") {
    return InvalidArgumentError("layout must be \"fsdp\" or \"hsdp\", not \"" + layout + "\"");
  }
  if (spec.hosts_size() == 0) {
    if (layout == "hsdp") return InvalidArgumentError("layout \"hsdp\" needs hosts");
    return OkStatus();
  }
  if (spec.hosts_size() == 1) {
    return InvalidArgumentError(
        "hosts names one server: list every server of the job (this one first), or none");
  }
  std::set<std::string> seen;
  for (const std::string& host : spec.hosts()) {
    if (host.empty() || host.find(':') == std::string::npos || !seen.insert(host).second) {
      return InvalidArgumentError("hosts must be distinct host:port addresses; \"" + host +
                                  "\" is not");
    }
  }
  if (spec.rendezvous_port() < 0 || spec.rendezvous_port() > 65535 ||
      spec.collective_timeout_ms() < 0) {
    return InvalidArgumentError("rendezvous_port must be a port, collective_timeout_ms >= 0");
  }
  return OkStatus();
}

// The request's spec as the service takes it: the training spec's checks,
// and a checkpoint directory the server can find again after a restart.
Status ValidateJobSpec(const training::JobSpec& spec) {
  CHORUS_RETURN_IF_ERROR(SpecOf(spec).Validate());
  const std::string& checkpoints = spec.checkpoint_dir();
  if (!checkpoints.empty() && checkpoints.front() != '/') {
    return InvalidArgumentError("checkpoint_dir must be an absolute path on the server, not \"" +
                                checkpoints + "\"");
  }
  if (spec.checkpoint_interval() < 0 || (spec.checkpoint_interval() > 0 && checkpoints.empty())) {
    return InvalidArgumentError(
        "checkpoint_interval must be >= 0, and > 0 only with checkpoint_dir");
  }
  return ValidateHosts(spec);
}

// How long the job's collectives wait for the other ranks.
std::chrono::milliseconds CollectiveTimeout(const training::JobSpec& spec) {
  return std::chrono::milliseconds(spec.collective_timeout_ms() > 0 ? spec.collective_timeout_ms()
                                                                    : 60000);
}

// The codes an operation across servers ends with when its hosts may be out
// of step (a collective that failed or timed out, a host lost or cancelled):
// the job cannot go on.
bool BreaksTheJob(const Status& status) {
  switch (status.code()) {
    case StatusCode::kAborted:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kUnavailable:
    case StatusCode::kCancelled:
    case StatusCode::kInternal:
    case StatusCode::kUnknown:
    case StatusCode::kDataLoss:
      return true;
    default:
      return false;
  }
}

std::string NewInstanceId() {
  std::random_device random;
  char id[24];
  std::snprintf(id, sizeof(id), "%08x%08x", random(), random());
  return id;
}

int64_t NextVersion(const std::string& model_dir) {
  int64_t highest = 0;
  if (DIR* d = opendir(model_dir.c_str())) {
    while (dirent* entry = readdir(d)) {
      if (std::optional<int64_t> number = ParseNonNegativeInt64(entry->d_name)) {
        highest = std::max(highest, *number);
      }
    }
    closedir(d);
  }
  return highest + 1;
}

// StreamMetrics: sends the job's history from a step on, then each new step,
// until the job is deleted or the client goes away. Writes one message at a
// time; a step arriving meanwhile waits in `pending_`.
class MetricsStream final : public grpc::ServerWriteReactor<training::StepMetrics> {
 public:
  MetricsStream(std::shared_ptr<JobEntry> entry, std::string job_id, int64_t from_step)
      : entry_(std::move(entry)), job_id_(std::move(job_id)) {
    TrainingJob* job = entry_->job.get();
    MutexLock lock(&mu_);
    listener_ = job->Subscribe([this](const StepMetrics& m) { Push(m); }, [this] { Close(); });
    for (const StepMetrics& m : job->History()) {
      if (m.step >= from_step) pending_.push_back(m);
    }
    NextLocked();
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    NextLocked();
  }
  void OnCancel() override {
    MutexLock lock(&mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }
  void OnDone() override {
    entry_->job->Unsubscribe(listener_);
    delete this;
  }

 private:
  // The job is going away: send what is pending, then finish.
  void Close() {
    MutexLock lock(&mu_);
    closing_ = true;
    NextLocked();
  }
  void Push(const StepMetrics& m) {
    MutexLock lock(&mu_);
    pending_.push_back(m);
    NextLocked();
  }
  void NextLocked() CHORUS_REQUIRES(mu_) {
    if (writing_ || finished_) return;
    if (pending_.empty()) {
      if (closing_) FinishLocked(grpc::Status::OK);
      return;
    }
    message_.Clear();
    ToProto(job_id_, pending_.front(), &message_);
    pending_.pop_front();
    writing_ = true;
    StartWrite(&message_);
  }
  void FinishLocked(const grpc::Status& status) CHORUS_REQUIRES(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  std::shared_ptr<JobEntry> entry_;
  const std::string job_id_;
  Mutex mu_;
  std::deque<StepMetrics> pending_ CHORUS_GUARDED_BY(mu_);
  training::StepMetrics message_ CHORUS_GUARDED_BY(mu_);
  bool writing_ CHORUS_GUARDED_BY(mu_) = false;
  bool finished_ CHORUS_GUARDED_BY(mu_) = false;
  bool closing_ CHORUS_GUARDED_BY(mu_) = false;
  int listener_ = -1;
};

void FillStats(const std::string& id, const JobEntry& entry, training::JobStats* out) {
  const TrainingJob& job = *entry.job;
  out->set_job_id(id);
  out->set_name(entry.name);
  out->set_dp_shard(job.options().dp);
  out->set_tp(job.options().tp);
  for (int i : job.options().interpreters) out->add_interpreters(i);
  out->set_peak_flops_per_rank(job.options().peak_flops_per_rank);
  out->set_checkpoint_dir(job.options().checkpoint_dir);
  const Status failure = entry.failure();
  out->set_state(failure.ok() ? "READY" : "FAILED");
  out->set_reason(failure.message());
  out->set_step(job.CurrentStep());
  if (job.options().hosts > 1) {
    out->set_host(job.options().host);
    out->set_layout(job.options().layout);
  }
  if (entry.others) {
    for (const std::string& host : entry.others->hosts()) out->add_hosts(host);
  }
  auto history = job.History();
  if (!history.empty()) ToProto(id, history.back(), out->mutable_last());
}

}  // namespace

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

bool JobEntry::TakeInterpreters() {
  MutexLock lock(&mu_);
  return !std::exchange(interpreters_taken_, true);
}

TrainingService::TrainingService(Context context, JobRegistry* jobs, JobJournal* journal)
    : context_(std::move(context)), jobs_(jobs), journal_(journal), instance_id_(NewInstanceId()) {}

TrainingService::~TrainingService() { Stop(); }

void TrainingService::Stop() {
  joins_.Stop();
  std::thread watcher;
  {
    MutexLock lock(&watch_mu_);
    stop_watching_ = true;
    watcher.swap(watcher_);
  }
  watch_changed_.SignalAll();
  if (watcher.joinable()) watcher.join();
}

void TrainingService::WatchDrivers() {
  using Clock = std::chrono::steady_clock;
  std::map<std::string, std::unique_ptr<JobHosts::Stub>> drivers;  // by address
  std::map<std::string, Clock::time_point> heard;  // job id -> the driver's last answer
  std::set<std::string> confirmed;                 // jobs the driver has answered about
  for (;;) {
    {
      MutexLock lock(&watch_mu_);
      if (stop_watching_) return;
      watch_changed_.WaitUntil(&watch_mu_, Clock::now() + std::chrono::seconds(1));
      if (stop_watching_) return;
    }
    const std::map<std::string, std::shared_ptr<JobEntry>> jobs = jobs_->List();
    for (auto it = heard.begin(); it != heard.end();) {
      if (jobs.count(it->first) > 0) {
        ++it;
      } else {
        confirmed.erase(it->first);
        it = heard.erase(it);
      }
    }
    for (const auto& [id, entry] : jobs) {
      if (entry->driver.empty() || !entry->failure().ok()) continue;
      auto& stub = drivers[entry->driver];
      if (!stub) {
        stub = training::TrainingService::NewStub(
            grpc::CreateChannel(entry->driver, grpc::InsecureChannelCredentials()));
      }
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      if (!context_.authorizer->token().empty()) {
        context.AddMetadata("authorization", "Bearer " + context_.authorizer->token());
      }
      training::GetStatsRequest request;
      request.set_job_id(id);
      training::JobStats stats;
      const grpc::Status answer = stub->GetStats(&context, request, &stats);
      const auto now = Clock::now();
      if (heard.count(id) == 0) heard[id] = now;  // from when it is first watched
      std::string gone;
      if (answer.ok() && stats.state() != "FAILED") {
        heard[id] = now;
        confirmed.insert(id);
      } else if (answer.ok()) {
        gone = "it failed there: " + stats.reason();
      } else if (answer.error_code() == grpc::StatusCode::NOT_FOUND && confirmed.count(id) > 0) {
        // (Before the driver first knew it, the job may not be published there yet.)
        gone = "it no longer knows the job (restarted, or the job was deleted)";
      } else if (now - heard[id] > entry->job->options().collective_timeout) {
        gone = "no answer for " + std::to_string(entry->job->options().collective_timeout.count()) +
               " ms: " + answer.error_message();
      }
      if (gone.empty()) continue;
      heard.erase(id);
      confirmed.erase(id);
      std::shared_ptr<JobEntry> lost = entry;
      const std::string why = "its driver " + entry->driver + " is lost: " + gone;
      if (!entry->runner.Post([this, lost, id = id, why] {
            FailJob(id, *lost, UnavailableError(why)).IgnoreError();
          })) {
        continue;  // being deleted
      }
    }
  }
}

JobRegistry::~JobRegistry() {
  std::map<std::string, std::shared_ptr<JobEntry>> jobs;
  {
    MutexLock lock(&mu_);
    jobs.swap(jobs_);
  }
  // Stopped here, so that no entry is last released on its own runner's
  // thread (a runner cannot join itself).
  for (auto& [id, entry] : jobs) entry->runner.Stop();
}

StatusOr<std::vector<int>> JobRegistry::FreeLocked(int ranks) const {
  std::vector<int> free;
  for (int i = 0; i < manager_->size(); ++i) {
    if (held_.count(i) == 0) free.push_back(i);
  }
  if (ranks > static_cast<int>(free.size())) {
    return InvalidArgumentError("dp_shard x tp = " + std::to_string(ranks) +
                                " ranks need as many interpreters; the server has " +
                                std::to_string(manager_->size()) + " and " +
                                std::to_string(free.size()) + " are free");
  }
  return free;
}

Status JobRegistry::CheckFree(int ranks) const {
  MutexLock lock(&mu_);
  return FreeLocked(ranks).status();
}

StatusOr<std::vector<int>> JobRegistry::Reserve(int ranks) {
  MutexLock lock(&mu_);
  CHORUS_ASSIGN_OR_RETURN(std::vector<int> free, FreeLocked(ranks));
  free.resize(ranks);
  held_.insert(free.begin(), free.end());
  // Inference moves off them while any interpreter is left to serve.
  for (int i : free) manager_->SetReserved(i, true);
  return free;
}

void JobRegistry::Release(const std::vector<int>& interpreters) {
  MutexLock lock(&mu_);
  for (int i : interpreters) {
    held_.erase(i);
    manager_->SetReserved(i, false);
  }
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

std::map<std::string, JobRegistry::HeldJob> JobRegistry::ListHeld() const {
  MutexLock lock(&mu_);
  return held_ids_;
}

std::string JobRegistry::RenderMetrics() const {
  std::ostringstream out;
  std::vector<std::pair<std::string, StepMetrics>> last;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, entry] : jobs_) {
      auto history = entry->job->History();
      if (!history.empty()) last.emplace_back(id, history.back());
    }
  }
  auto gauge = [&](const char* name, const char* help, auto value) {
    AppendMetricHeader(out, name, "gauge", help);
    for (const auto& [id, m] : last) out << name << "{job=\"" << id << "\"} " << value(m) << "\n";
  };
  gauge("chorus_training_step", "Last completed step", [](const StepMetrics& m) { return m.step; });
  gauge("chorus_training_loss", "Loss of the last step",
        [](const StepMetrics& m) { return m.loss; });
  gauge("chorus_training_step_seconds", "Duration of the last step",
        [](const StepMetrics& m) { return m.step_seconds; });
  gauge("chorus_training_tokens_per_second", "Tokens per second, all ranks",
        [](const StepMetrics& m) { return m.tokens_per_second; });
  gauge("chorus_training_tokens_per_second_per_rank", "Tokens per second, one rank",
        [](const StepMetrics& m) { return m.tokens_per_second_per_rank; });
  gauge("chorus_training_mfu_pct", "Model FLOPs utilization, percent",
        [](const StepMetrics& m) { return m.mfu_pct; });
  gauge("chorus_training_memory_mib", "Peak memory of the busiest rank, MiB",
        [](const StepMetrics& m) { return m.memory_mib; });
  gauge("chorus_training_cross_host_bytes_per_host",
        "Bytes each host sent the others in the last step (jobs across servers)",
        [](const StepMetrics& m) { return m.cross_host_bytes; });
  return out.str();
}

grpc::ServerUnaryReactor* TrainingService::OnJob(
    grpc::CallbackServerContext* ctx, const std::string& job_id,
    std::function<Status(JobEntry&, const StopConditions&)> work) {
  if (Status auth = AuthorizeCall(*context_.authorizer, *ctx); !auth.ok()) return Finish(ctx, auth);
  StatusOr<std::shared_ptr<JobEntry>> entry = jobs_->Find(job_id);
  if (!entry.ok()) return Finish(ctx, entry.status());
  if (Status caller = CheckCaller(*ctx, job_id, **entry); !caller.ok()) return Finish(ctx, caller);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::shared_ptr<JobEntry> job = *entry;
  StopConditions stop;
  stop.deadline = ClientDeadline(*ctx);
  stop.cancelled = [ctx] { return ctx->IsCancelled(); };
  if (!job->runner.Post([job, reactor, stop, work = std::move(work)] {
        Status status = stop.Check();
        // It may have failed while this call waited.
        if (status.ok()) status = job->failure();
        reactor->Finish(ToGrpcStatus(status.ok() ? work(*job, stop) : status));
      })) {
    reactor->Finish(ToGrpcStatus(NotFoundError("training job \"" + job_id + "\" was deleted")));
  }
  return reactor;
}

Status TrainingService::CheckCaller(const grpc::CallbackServerContext& ctx, const std::string& id,
                                    const JobEntry& entry) const {
  if (Status failure = entry.failure(); !failure.ok()) return failure;
  if (entry.driver.empty()) return OkStatus();
  auto marker = ctx.client_metadata().find(kDriverMetadata);
  if (marker != ctx.client_metadata().end() &&
      std::string_view(marker->second.data(), marker->second.size()) == entry.driver_instance) {
    return OkStatus();
  }
  return FailedPreconditionError("training job " + id + " spans servers: call its driver, " +
                                 entry.driver);
}

Status TrainingService::FailJob(const std::string& id, JobEntry& entry, const Status& why) {
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
  entry.job->Shutdown();
  if (entry.TakeInterpreters()) jobs_->Release(entry.job->options().interpreters);
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

Status TrainingService::OnEveryHost(const std::string& id, JobEntry& entry,
                                    const std::function<Status()>& local,
                                    const JobHosts::RemoteCall& remote) {
  Status status = entry.others ? entry.others->Run(local, remote) : local();
  if (status.ok() || !entry.spans_hosts() || !BreaksTheJob(status)) return status;
  return FailJob(id, entry, status);
}

StatusOr<std::shared_ptr<JobEntry>> TrainingService::BuildJob(const std::string& id,
                                                              const training::JobSpec& spec,
                                                              const Placement& placement) {
  const int dp = std::max(1, spec.dp_shard()), tp = std::max(1, spec.tp());
  CHORUS_ASSIGN_OR_RETURN(std::vector<int> held, jobs_->Reserve(dp * tp));
  auto release_on_error = [&](Status status) {
    jobs_->Release(held);
    return status;
  };
  StatusOr<std::shared_ptr<Archive>> archive = Archive::Open(spec.archive());
  if (!archive.ok()) {
    return release_on_error(InvalidArgumentError("spec.archive: " + archive.status().message()));
  }
  if (context_.trusted_keys) {
    if (Status trusted = context_.trusted_keys->Verify(**archive); !trusted.ok()) {
      return release_on_error(trusted);
    }
  }
  TrainingJobOptions options;
  options.id = id;
  options.archive = *archive;
  options.spec = SpecOf(spec);
  options.dp = dp;
  options.tp = tp;
  options.interpreters = held;
  options.metrics_log = spec.metrics_log();
  options.checkpoint_dir = spec.checkpoint_dir();
  options.checkpoint_interval = spec.checkpoint_interval();
  options.collective_timeout = CollectiveTimeout(spec);
  const bool across_hosts = spec.hosts_size() > 1;
  if (across_hosts) {
    options.hosts = spec.hosts_size();
    options.host = placement.host;
    options.rendezvous = placement.rendezvous;
    options.gloo_host = HostOfAddress(spec.hosts(placement.host));
    options.layout = spec.layout().empty() ? "fsdp" : spec.layout();
    options.resume_from = placement.resume_from;
    options.resume_latest = false;  // the driver says where every host resumes
  }
  StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(context_.manager, options);
  if (!job.ok()) return release_on_error(job.status());
  if (!spec.checkpoint_dir().empty() && !across_hosts) {
    if (Status recorded = journal_->Put(id, spec); !recorded.ok()) {
      (*job)->Shutdown();
      return release_on_error(
          recorded.Annotate("cannot record the job to resume it after a crash"));
    }
  }
  auto entry = std::make_shared<JobEntry>(spec.name(), std::move(*job), placement.others,
                                          placement.host > 0 ? spec.hosts(0) : "",
                                          placement.driver_instance);
  Log().info("training job {} ({}): dp {} x tp {} on {} interpreters{}, at step {}", id,
             spec.name(), dp, tp, held.size(),
             across_hosts ? ", host " + std::to_string(placement.host) + " of " +
                                std::to_string(spec.hosts_size())
                          : "",
             entry->job->CurrentStep());
  return entry;
}

StatusOr<std::shared_ptr<JobEntry>> TrainingService::BuildAcrossHosts(
    const std::string& id, const training::JobSpec& spec) {
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
  const std::string& resume_from = placement.resume_from;
  auto ask = [&](bool check_only) {
    return [&, check_only](int host, JobHosts::Stub& stub, grpc::ClientContext& context) {
      training::JoinJobRequest request;
      request.set_job_id(id);
      *request.mutable_spec() = spec;
      request.set_host(host);
      request.set_rendezvous_host(rendezvous_host);
      request.set_rendezvous_port((*rendezvous)->port());
      request.set_driver_instance(instance_id_);
      request.set_resume_from(check_only ? "" : resume_from);
      request.set_check_only(check_only);
      training::JoinJobResponse response;
      return stub.JoinJob(&context, request, &response);
    };
  };
  // A host that cannot join says so now, not after the rendezvous timeout.
  Status can = jobs_->CheckFree(std::max(1, spec.dp_shard()) * std::max(1, spec.tp()));
  if (can.ok()) can = placement.others->OnOthers(ask(true), std::chrono::seconds(30));
  if (!can.ok()) {
    return can.Annotate("creating training job " + id + " across " +
                        std::to_string(spec.hosts_size()) + " servers");
  }
  StatusOr<std::shared_ptr<JobEntry>> built = InternalError("not built");
  Status joined = placement.others->Run(
      [&] {
        built = BuildJob(id, spec, placement);
        return built.status();
      },
      ask(false));
  if (joined.ok()) return built;
  // Whoever did join frees its ranks again.
  if (built.ok()) {
    (*built)->job->Shutdown();
    jobs_->Release((*built)->job->options().interpreters);
  }
  (void)placement.others->DeleteOnOthers(id, std::chrono::seconds(5));
  return joined.Annotate("creating training job " + id + " across " +
                         std::to_string(spec.hosts_size()) + " servers");
}

grpc::ServerUnaryReactor* TrainingService::CreateJob(grpc::CallbackServerContext* ctx,
                                                     const training::CreateJobRequest* request,
                                                     training::CreateJobResponse* response) {
  if (Status auth = AuthorizeCall(*context_.authorizer, *ctx); !auth.ok()) return Finish(ctx, auth);
  const training::JobSpec& spec = request->spec();
  if (Status valid = ValidateJobSpec(spec); !valid.ok()) return Finish(ctx, valid);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // Building the model takes a while: off the reactor, on the shared runner.
  // The job is published only once it exists.
  const bool posted = context_.background->Post([this, reactor, spec, response] {
    StatusOr<std::string> id = journal_->NewId();
    if (!id.ok()) {
      reactor->Finish(ToGrpcStatus(id.status().Annotate("cannot record a new job id")));
      return;
    }
    const bool across_hosts = spec.hosts_size() > 1;
    // Unique on every host of the job, not only here.
    if (across_hosts) *id += "-" + instance_id_.substr(0, 8);
    StatusOr<std::shared_ptr<JobEntry>> entry =
        across_hosts ? BuildAcrossHosts(*id, spec) : BuildJob(*id, spec, Placement{});
    if (entry.ok()) {
      jobs_->Add(*id, *entry);
      response->set_job_id(*id);
      for (int i : (*entry)->job->options().interpreters) response->add_interpreters(i);
      response->set_step((*entry)->job->CurrentStep());
    }
    reactor->Finish(ToGrpcStatus(entry.status()));
  });
  if (!posted) reactor->Finish(ToGrpcStatus(UnavailableError("the server is shutting down")));
  return reactor;
}

Status TrainingService::ResumeJournaledJobs(const std::map<std::string, std::string>& quarantined) {
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
      if (job.ok()) {
        jobs_->Add(id, *job);
        return;
      }
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

grpc::ServerUnaryReactor* TrainingService::Step(grpc::CallbackServerContext* ctx,
                                                const training::StepRequest* request,
                                                training::StepResponse* response) {
  std::optional<at::Tensor> batch;
  if (request->has_batch()) {
    StatusOr<at::Tensor> tokens = FromProto(request->batch());
    if (!tokens.ok()) return Finish(ctx, tokens.status());
    batch = *tokens;
  }
  const std::string id = request->job_id();
  return OnJob(ctx, id, [=](JobEntry& entry, const StopConditions& stop) -> Status {
    const TrainingJobOptions& options = entry.job->options();
    if (batch) {
      const int64_t rows = options.spec.global_batch;
      const int64_t columns = options.spec.seq_len;
      if (batch->dim() != 2 || batch->scalar_type() != at::kLong ||
          (rows > 0 && batch->size(0) != rows) || (columns > 0 && batch->size(1) != columns + 1) ||
          batch->size(0) % (options.hosts * options.dp) != 0) {
        return InvalidArgumentError("batch must be INT64 [global_batch, seq_len + 1] = [" +
                                    std::to_string(rows) + ", " + std::to_string(columns + 1) +
                                    "], divisible among the data-parallel ranks");
      }
    }
    const int count = batch ? 1 : std::max(1, request->steps());
    // Across servers, step by step: every host takes each step, and the
    // client's deadline or cancellation is seen here, between steps.
    const int per_call = entry.others ? 1 : count;
    for (int done = 0; done < count; done += per_call) {
      if (Status stopped = stop.Check(); !stopped.ok() && entry.others) {
        return stopped.Annotate("training job " + id + " stopped after " + std::to_string(done) +
                                " of " + std::to_string(count) + " steps");
      }
      std::vector<StepMetrics> steps;
      CHORUS_RETURN_IF_ERROR(OnEveryHost(
          id, entry,
          [&]() -> Status {
            StatusOr<std::vector<StepMetrics>> ran =
                entry.job->Step(per_call, batch, entry.others ? StopConditions{} : stop);
            if (ran.ok()) steps = std::move(*ran);
            return ran.status();
          },
          [&](int, JobHosts::Stub& stub, grpc::ClientContext& context) {
            training::StepRequest forwarded;
            forwarded.set_job_id(id);
            forwarded.set_steps(per_call);
            if (request->has_batch()) *forwarded.mutable_batch() = request->batch();
            training::StepResponse answer;
            return stub.Step(&context, forwarded, &answer);
          }));
      for (const StepMetrics& m : steps) ToProto(id, m, response->add_steps());
    }
    return OkStatus();
  });
}

grpc::ServerUnaryReactor* TrainingService::SaveCheckpoint(
    grpc::CallbackServerContext* ctx, const training::SaveCheckpointRequest* request,
    training::SaveCheckpointResponse* response) {
  const std::string id = request->job_id();
  return OnJob(ctx, id, [=](JobEntry& entry, const StopConditions&) -> Status {
    std::string path;
    CHORUS_RETURN_IF_ERROR(OnEveryHost(
        id, entry,
        [&]() -> Status {
          StatusOr<std::string> saved = request->directory().empty()
                                            ? entry.job->SaveToCheckpointDir()
                                            : entry.job->Save(request->directory());
          if (saved.ok()) path = *saved;
          return saved.status();
        },
        [&](int, JobHosts::Stub& stub, grpc::ClientContext& context) {
          training::SaveCheckpointResponse answer;
          return stub.SaveCheckpoint(&context, *request, &answer);
        }));
    response->set_path(path);
    response->set_step(entry.job->CurrentStep());
    return OkStatus();
  });
}

grpc::ServerUnaryReactor* TrainingService::LoadCheckpoint(
    grpc::CallbackServerContext* ctx, const training::LoadCheckpointRequest* request,
    training::LoadCheckpointResponse* response) {
  const std::string id = request->job_id();
  return OnJob(ctx, id, [=](JobEntry& entry, const StopConditions&) -> Status {
    if (!entry.others) {
      CHORUS_ASSIGN_OR_RETURN(int64_t step, entry.job->Load(request->path()));
      response->set_step(step);
      return OkStatus();
    }
    // The driver names the step folder (its `latest` may be the only one) and
    // checks its own part first: a bad path fails the call, not the job.
    CHORUS_ASSIGN_OR_RETURN(const std::string folder, entry.job->CheckpointFolder(request->path()));
    Status loaded = OnEveryHost(
        id, entry,
        [&]() -> Status {
          CHORUS_ASSIGN_OR_RETURN(int64_t step, entry.job->Load(folder));
          response->set_step(step);
          return OkStatus();
        },
        [&](int, JobHosts::Stub& stub, grpc::ClientContext& context) {
          training::LoadCheckpointRequest forwarded;
          forwarded.set_job_id(id);
          forwarded.set_path(folder);
          training::LoadCheckpointResponse answer;
          return stub.LoadCheckpoint(&context, forwarded, &answer);
        });
    // Some hosts may have loaded and others not: they are out of step.
    if (!loaded.ok() && entry.failure().ok()) return FailJob(id, entry, loaded);
    return loaded;
  });
}

grpc::ServerUnaryReactor* TrainingService::Export(grpc::CallbackServerContext* ctx,
                                                  const training::ExportRequest* request,
                                                  training::ExportResponse* response) {
  ModelRepository* repository = context_.repository;
  const std::string root = context_.model_repository;
  const std::string id = request->job_id();
  return OnJob(ctx, id, [=](JobEntry& entry, const StopConditions&) -> Status {
    const std::string& name = request->model_name();
    CHORUS_RETURN_IF_ERROR(CheckModelName(name));
    const int64_t example_length = request->example_length() > 0 ? request->example_length() : 8;
    if (!entry.driver.empty()) {
      // Another host of the job: its ranks take part in gathering the
      // weights; the driver's first rank writes them.
      return OnEveryHost(
          id, entry,
          [&] { return entry.job->Export("", name, request->version(), example_length); }, nullptr);
    }
    const int64_t version =
        request->version() > 0 ? request->version() : NextVersion(root + "/" + name);
    const std::string dir = root + "/" + name + "/" + std::to_string(version);
    CHORUS_RETURN_IF_ERROR(MakeDirectories(dir));
    const std::string path = dir + "/model.pt";
    CHORUS_RETURN_IF_ERROR(OnEveryHost(
        id, entry, [&] { return entry.job->Export(path, name, version, example_length); },
        [&](int, JobHosts::Stub& stub, grpc::ClientContext& context) {
          training::ExportRequest forwarded = *request;
          forwarded.set_version(version);
          training::ExportResponse answer;
          return stub.Export(&context, forwarded, &answer);
        }));
    CHORUS_RETURN_IF_ERROR(repository->Load(name));
    response->set_path(path);
    response->set_version(version);
    return OkStatus();
  });
}

grpc::ServerUnaryReactor* TrainingService::Evaluate(grpc::CallbackServerContext* ctx,
                                                    const training::EvaluateRequest* request,
                                                    training::EvaluateResponse* response) {
  StatusOr<at::Tensor> tokens = FromProto(request->tokens());
  if (!tokens.ok()) return Finish(ctx, tokens.status());
  at::Tensor input = *tokens;
  const std::string id = request->job_id();
  return OnJob(ctx, id, [=](JobEntry& entry, const StopConditions&) -> Status {
    return OnEveryHost(
        id, entry,
        [&]() -> Status {
          CHORUS_ASSIGN_OR_RETURN(at::Tensor output, entry.job->Evaluate(input));
          ToProto(output, response->mutable_output());
          return OkStatus();
        },
        [&](int, JobHosts::Stub& stub, grpc::ClientContext& context) {
          training::EvaluateResponse answer;
          return stub.Evaluate(&context, *request, &answer);
        });
  });
}

grpc::ServerUnaryReactor* TrainingService::GetStats(grpc::CallbackServerContext* ctx,
                                                    const training::GetStatsRequest* request,
                                                    training::JobStats* response) {
  if (Status auth = AuthorizeCall(*context_.authorizer, *ctx); !auth.ok()) return Finish(ctx, auth);
  StatusOr<std::shared_ptr<JobEntry>> entry = jobs_->Find(request->job_id());
  if (!entry.ok()) return Finish(ctx, entry.status());
  FillStats(request->job_id(), **entry, response);
  return Finish(ctx, OkStatus());
}

grpc::ServerUnaryReactor* TrainingService::ListJobs(grpc::CallbackServerContext* ctx,
                                                    const training::ListJobsRequest*,
                                                    training::ListJobsResponse* response) {
  if (Status auth = AuthorizeCall(*context_.authorizer, *ctx); !auth.ok()) return Finish(ctx, auth);
  for (const auto& [id, entry] : jobs_->List()) FillStats(id, *entry, response->add_jobs());
  // Jobs being resumed are listed too: a client that lost a CreateJob's answer
  // to a crash finds (and can delete) the job that was made.
  for (const auto& [id, held] : jobs_->ListHeld()) {
    training::JobStats* stats = response->add_jobs();
    stats->set_job_id(id);
    stats->set_name(held.name);
    stats->set_state(held.why.code() == StatusCode::kUnavailable ? "RESUMING" : "FAILED");
    stats->set_reason(held.why.message());
  }
  return Finish(ctx, OkStatus());
}

grpc::ServerWriteReactor<training::StepMetrics>* TrainingService::StreamMetrics(
    grpc::CallbackServerContext* ctx, const training::StreamMetricsRequest* request) {
  StatusOr<std::shared_ptr<JobEntry>> entry = jobs_->Find(request->job_id());
  Status auth = AuthorizeCall(*context_.authorizer, *ctx);
  if (!auth.ok() || !entry.ok()) {
    class Refused final : public grpc::ServerWriteReactor<training::StepMetrics> {
     public:
      explicit Refused(const grpc::Status& status) { Finish(status); }
      void OnDone() override { delete this; }
    };
    return new Refused(ToGrpcStatus(!auth.ok() ? auth : entry.status()));
  }
  return new MetricsStream(*entry, request->job_id(), request->from_step());
}

grpc::ServerUnaryReactor* TrainingService::DeleteJob(grpc::CallbackServerContext* ctx,
                                                     const training::DeleteJobRequest* request,
                                                     training::DeleteJobResponse*) {
  if (Status auth = AuthorizeCall(*context_.authorizer, *ctx); !auth.ok()) return Finish(ctx, auth);
  if (StatusOr<std::shared_ptr<JobEntry>> found = jobs_->Find(request->job_id()); found.ok()) {
    // Another host's part of a job across servers goes with the job, unless it failed.
    Status caller = CheckCaller(*ctx, request->job_id(), **found);
    if (!caller.ok() && (*found)->failure().ok()) return Finish(ctx, caller);
  }
  StatusOr<std::shared_ptr<JobEntry>> removed = jobs_->Remove(request->job_id());
  if (!removed.ok()) return Finish(ctx, removed.status());
  std::shared_ptr<JobEntry> entry = *removed;  // null: one that could not be resumed
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  JobRegistry* jobs = jobs_;
  JobJournal* journal = journal_;
  // Tearing down waits for the job's running operation, and the journal is a
  // file written through: off the reactor. Who still holds the entry (a stats
  // call, a stream) keeps a valid, shut job.
  const std::string id = request->job_id();
  auto tear_down = [entry, reactor, jobs, journal, id] {
    // Not recreated after a restart from now on (its checkpoints stay).
    if (Status forgotten = journal->Remove(id); !forgotten.ok()) {
      Log().warn("training job {}: {}", id, forgotten.ToString());
    }
    if (!entry) {
      reactor->Finish(grpc::Status::OK);
      return;
    }
    entry->runner.Stop();                         // finishes queued operations
    entry->job->Close(std::chrono::seconds(10));  // ends metric streams
    entry->job->Shutdown();                       // frees its interpreters' state
    if (entry->TakeInterpreters()) jobs->Release(entry->job->options().interpreters);
    if (entry->others && entry->failure().ok()) {
      Status told = entry->others->DeleteOnOthers(id, std::chrono::seconds(10));
      if (!told.ok())
        Log().warn("training job {}: deleting it on the other hosts: {}", id, told.ToString());
    }
    reactor->Finish(grpc::Status::OK);
  };
  if (!context_.background->Post(tear_down)) tear_down();  // shutting down: do it here
  return reactor;
}

grpc::ServerUnaryReactor* TrainingService::JoinJob(grpc::CallbackServerContext* ctx,
                                                   const training::JoinJobRequest* request,
                                                   training::JoinJobResponse* response) {
  if (Status auth = AuthorizeCall(*context_.authorizer, *ctx); !auth.ok()) return Finish(ctx, auth);
  const training::JobSpec& spec = request->spec();
  if (Status valid = ValidateJobSpec(spec); !valid.ok()) return Finish(ctx, valid);
  const int host = request->host();
  if (spec.hosts_size() < 2 || host < 1 || host >= spec.hosts_size()) {
    return Finish(ctx, InvalidArgumentError("JoinJob: host " + std::to_string(host) +
                                            " of a job on " + std::to_string(spec.hosts_size()) +
                                            " hosts (the driver is host 0)"));
  }
  if (request->driver_instance() == instance_id_) {
    return Finish(ctx,
                  InvalidArgumentError("hosts[" + std::to_string(host) + "] (" + spec.hosts(host) +
                                       ") is the driver itself: list every server once, "
                                       "the one called first"));
  }
  if (jobs_->Find(request->job_id()).ok()) {
    return Finish(ctx, Status(StatusCode::kAlreadyExists,
                              "training job " + request->job_id() + " exists on this server"));
  }
  if (request->check_only()) {
    Status free = jobs_->CheckFree(std::max(1, spec.dp_shard()) * std::max(1, spec.tp()));
    if (free.ok() && ::access(spec.archive().c_str(), R_OK) != 0) {
      free = InvalidArgumentError("spec.archive: cannot read " + spec.archive() + " here");
    }
    return Finish(ctx, free);
  }
  {
    MutexLock lock(&watch_mu_);
    if (!watcher_.joinable() && !stop_watching_) watcher_ = std::thread([this] { WatchDrivers(); });
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const training::JoinJobRequest join = *request;
  const bool posted = joins_.Post([this, ctx, reactor, join, response] {
    const std::chrono::milliseconds timeout = CollectiveTimeout(join.spec());
    StatusOr<std::shared_ptr<Rendezvous>> rendezvous = Rendezvous::Connect(
        join.rendezvous_host(), join.rendezvous_port(), /*serve=*/false, timeout);
    if (!rendezvous.ok()) {
      reactor->Finish(ToGrpcStatus(rendezvous.status().Annotate(
          "reaching the driver's rendezvous at " + join.rendezvous_host() + ":" +
          std::to_string(join.rendezvous_port()))));
      return;
    }
    Placement placement;
    placement.host = join.host();
    placement.rendezvous = *rendezvous;
    placement.resume_from = join.resume_from();
    placement.driver_instance = join.driver_instance();
    StatusOr<std::shared_ptr<JobEntry>> entry = BuildJob(join.job_id(), join.spec(), placement);
    if (entry.ok() && ctx->IsCancelled()) {
      // The driver gave up (its own part failed): nobody will drive this one.
      (*entry)->job->Shutdown();
      jobs_->Release((*entry)->job->options().interpreters);
      entry = Status(StatusCode::kCancelled, "the driver cancelled the join");
    }
    if (entry.ok()) {
      jobs_->Add(join.job_id(), *entry);
      for (int i : (*entry)->job->options().interpreters) response->add_interpreters(i);
      response->set_step((*entry)->job->CurrentStep());
    }
    reactor->Finish(ToGrpcStatus(entry.status()));
  });
  if (!posted) reactor->Finish(ToGrpcStatus(UnavailableError("the server is shutting down")));
  return reactor;
}

}  // namespace chorus
