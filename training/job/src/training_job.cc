#include "chorus/training/job/training_job.h"

#include <ATen/Parallel.h>
#include <ATen/core/ivalue.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "chorus/common/crash_label.h"
#include "chorus/common/crash_report.h"
#include "chorus/common/file_util.h"
#include "chorus/common/logging.h"
#include "chorus/common/process_stats.h"
#include "chorus/package/model.h"
#include "chorus/training/collectives/bindings.h"
#include "chorus/training/collectives/communicator.h"

namespace chorus {
namespace {

// The number `result[key]` of a rank's step result (a dict); an error, never
// an exception, when the trainer returned something else.
StatusOr<double> NumberIn(const c10::IValue& result, const char* key) {
  if (result.isGenericDict()) {
    auto dict = result.toGenericDict();
    auto it = dict.find(key);
    if (it != dict.end() && (it->value().isDouble() || it->value().isInt())) {
      return it->value().isDouble() ? it->value().toDouble()
                                    : static_cast<double>(it->value().toInt());
    }
  }
  return InternalError(std::string("chorus.training.trainer.step returned no number \"") + key +
                       "\" (got a " + result.tagKind() + ")");
}

constexpr char kTrainer[] = "chorus.training.trainer";

}  // namespace

double CpuMatmulPeakFlops() {
  static const double peak = [] {
    at::Tensor a = at::randn({1024, 1024}), b = at::randn({1024, 1024});
    at::mm(a, b);  // warm-up
    double best = 0;
    for (int round = 0; round < 5; ++round) {
      auto start = std::chrono::steady_clock::now();
      at::mm(a, b);
      double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, 2.0 * 1024 * 1024 * 1024 / seconds);
    }
    const double threads = std::max(1, at::get_num_threads());
    return best / threads * std::max(1u, std::thread::hardware_concurrency());
  }();
  return peak;
}

TrainingJob::TrainingJob(InterpreterManager* manager, TrainingJobOptions options)
    : manager_(manager), options_(std::move(options)) {}

StatusOr<std::unique_ptr<TrainingJob>> TrainingJob::Create(InterpreterManager* manager,
                                                           TrainingJobOptions options) {
  const int world = options.dp * options.tp;
  if (options.dp < 1 || options.tp < 1) {
    return InvalidArgumentError("dp_shard and tp must be at least 1");
  }
  CHORUS_RETURN_IF_ERROR(options.spec.Validate());
  if (options.spec.global_batch > 0 && options.spec.global_batch % options.dp != 0) {
    return InvalidArgumentError("global_batch " + std::to_string(options.spec.global_batch) +
                                " does not divide among dp_shard " + std::to_string(options.dp));
  }
  if (options.hosts < 1 || options.host < 0 || options.host >= options.hosts) {
    return InvalidArgumentError("host " + std::to_string(options.host) + " of " +
                                std::to_string(options.hosts) + " hosts");
  }
  const int data_ranks = options.hosts * options.dp;
  if (options.spec.global_batch > 0 && options.spec.global_batch % data_ranks != 0) {
    return InvalidArgumentError("global_batch " + std::to_string(options.spec.global_batch) +
                                " does not divide among " + std::to_string(data_ranks) +
                                " data-parallel ranks (hosts x dp_shard)");
  }
  if (static_cast<int>(options.interpreters.size()) != world) {
    return InvalidArgumentError("dp_shard x tp = " + std::to_string(world) +
                                " ranks need as many "
                                "interpreters; " +
                                std::to_string(options.interpreters.size()) + " given");
  }
  if (options.peak_flops_per_rank <= 0) {
    options.peak_flops_per_rank = CpuMatmulPeakFlops() / std::max(1, world);
  }
  std::unique_ptr<TrainingJob> job(new TrainingJob(manager, std::move(options)));
  CHORUS_RETURN_IF_ERROR(job->ConnectRanks());
  TrainingJob* raw = job.get();
  StatusOr<std::vector<c10::IValue>> created = job->RunOnRanks("create_rank", [raw](int rank) {
    return std::vector<c10::IValue>{ArchiveToIValue(raw->options_.archive),
                                    raw->options_.spec.ToJson(),
                                    raw->dp_comms_[rank],
                                    raw->tp_comms_[rank],
                                    raw->shard_comms_[rank],
                                    raw->replicate_comms_[rank]};
  });
  if (!created.ok()) {
    // The message is the spec's problem, as Python reported it.
    return InvalidArgumentError("cannot create the job: " + created.status().message());
  }
  const std::string& checkpoints = job->options_.checkpoint_dir;
  std::string resume = job->options_.resume_from;
  if (resume.empty() && !checkpoints.empty() && job->options_.resume_latest) {
    resume = LatestCheckpoint(checkpoints);
  }
  if (!resume.empty()) {
    MutexLock lock(&job->mu_);
    StatusOr<int64_t> step = job->LoadLocked(checkpoints + "/" + resume);
    if (!step.ok()) return step.status().Annotate("resuming from " + checkpoints);
    Log().info("training job {} resumed from {} at step {} ({})", job->options_.id, checkpoints,
               *step, resume);
  }
  return job;
}

Status TrainingJob::ConnectRanks() {
  const int world = world_size();
  CommunicatorOptions comm_options;
  comm_options.timeout = options_.collective_timeout;
  comm_options.gloo_host = options_.gloo_host;
  std::vector<MeshRank> mesh = CreateInProcessMesh(options_.dp, options_.tp, comm_options);
  const c10::IValue none;
  shard_comms_.assign(world, none);
  replicate_comms_.assign(world, none);
  if (options_.hosts <= 1) {
    for (const MeshRank& rank : mesh) {
      dp_comms_.push_back(CommunicatorToIValue(rank.dp));
      tp_comms_.push_back(CommunicatorToIValue(rank.tp));
    }
    return OkStatus();
  }
  if (options_.layout != "fsdp" && options_.layout != "hsdp") {
    return InvalidArgumentError("layout must be \"fsdp\" or \"hsdp\", not \"" + options_.layout +
                                "\"");
  }
  if (!options_.rendezvous) return InvalidArgumentError("a job across hosts needs a rendezvous");
  // Rank r meets rank r of every other host; the groups form concurrently,
  // since each blocks until all its members have joined.
  std::vector<StatusOr<std::shared_ptr<Communicator>>> cross(
      world, InternalError("rank did not join the other hosts"));
  std::vector<std::thread> joining;
  for (int rank = 0; rank < world; ++rank) {
    joining.emplace_back([&, rank] {
      cross[rank] = CreateGlooCommunicator(*options_.rendezvous,
                                           options_.id + "/cross/" + std::to_string(rank),
                                           options_.host, options_.hosts, comm_options);
    });
  }
  for (auto& thread : joining) thread.join();
  for (int rank = 0; rank < world; ++rank) {
    if (!cross[rank].ok()) {
      return cross[rank].status().Annotate("host " + std::to_string(options_.host) +
                                           " joining the other hosts");
    }
    std::shared_ptr<Communicator> local =
        mesh[rank].dp ? mesh[rank].dp : InProcessGroup::Create(1, comm_options)->Rank(0);
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<HierarchicalCommunicator> data,
                            CreateHierarchicalCommunicator(local, *cross[rank]));
    cross_host_.push_back(data);
    // The hierarchy splits the data and averages the loss over every rank;
    // FSDP shards over it too, HSDP over the host's group only.
    dp_comms_.push_back(CommunicatorToIValue(data));
    tp_comms_.push_back(CommunicatorToIValue(mesh[rank].tp));
    if (options_.layout == "hsdp") {
      shard_comms_[rank] = CommunicatorToIValue(data->local());
      replicate_comms_[rank] = CommunicatorToIValue(data->cross());
    }
  }
  return OkStatus();
}

int64_t TrainingJob::CrossHostBytes() const {
  int64_t bytes = 0;
  for (const auto& rank : cross_host_) bytes += rank->cross_host_bytes();
  return bytes;
}

StatusOr<bool> TrainingJob::AllHostsAgree(bool ok) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<c10::IValue> votes,
                          RunOnRanks("agree", [ok](int) { return std::vector<c10::IValue>{ok}; }));
  return votes[0].isBool() && votes[0].toBool();
}

TrainingJob::~TrainingJob() { Shutdown(); }

void TrainingJob::Shutdown() {
  MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  Status deleted = RunOnRanks("delete", [](int) { return std::vector<c10::IValue>{}; }).status();
  if (!deleted.ok())
    Log().warn("training job {}: deleting its state: {}", options_.id, deleted.ToString());
  // The model, optimizer state and activations just freed: back to the system.
  ReleaseFreeMemory();
}

Status TrainingJob::CheckOpen() const {
  if (shut_down_) return FailedPreconditionError("training job " + options_.id + " was deleted");
  return OkStatus();
}

StatusOr<std::vector<c10::IValue>> TrainingJob::RunOnRanks(
    const std::string& function, const std::function<std::vector<c10::IValue>(int)>& args) {
  const int world = world_size();
  std::vector<StatusOr<c10::IValue>> results(world, InternalError("rank did not run"));
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      // Named in a crash report, so the supervisor knows which job was running.
      ScopedCrashContext crash_context(CrashLabel::TrainingJob(options_.id, rank).text());
      crash_context.Append(", ");
      crash_context.Append(function);
      InterpreterSession session = manager_->Acquire(options_.interpreters[rank]);
      StatusOr<Object> fn = session.Global(kTrainer, function);
      if (!fn.ok()) {
        results[rank] = fn.status();
        return;
      }
      std::vector<c10::IValue> call{options_.id};
      for (c10::IValue& arg : args(rank)) call.push_back(std::move(arg));
      StatusOr<Object> out = fn->Call(call);
      results[rank] = out.ok() ? out->ToIValue() : StatusOr<c10::IValue>(out.status());
    });
  }
  for (auto& thread : ranks) thread.join();
  std::vector<c10::IValue> values;
  for (int rank = 0; rank < world; ++rank) {
    if (!results[rank].ok()) {
      const Status& status = results[rank].status();
      if (status.python_error() != nullptr) {
        Log().warn("job {} rank {}: {} failed: {}\n{}", options_.id, rank, function,
                   status.message(), status.python_error()->traceback);
      }
      return status.Annotate("rank " + std::to_string(rank));
    }
    values.push_back(std::move(results[rank]).value());
  }
  return values;
}

void TrainingJob::Record(const StepMetrics& metrics) {
  std::vector<std::function<void(const StepMetrics&)>> listeners;
  {
    MutexLock lock(&history_mu_);
    history_.push_back(metrics);
    step_ = metrics.step;
    for (const Listener& listener : listeners_) listeners.push_back(listener.step);
  }
  for (const auto& listener : listeners) listener(metrics);
  if (!options_.metrics_log.empty()) {
    nlohmann::json line = {{"job", options_.id},
                           {"step", metrics.step},
                           {"loss", metrics.loss},
                           {"lr", metrics.lr},
                           {"step_s", metrics.step_seconds},
                           {"tokens_per_s", metrics.tokens_per_second},
                           {"tokens_per_s_per_rank", metrics.tokens_per_second_per_rank},
                           {"mfu_pct", metrics.mfu_pct},
                           {"memory_mib", metrics.memory_mib},
                           {"cross_host_bytes", metrics.cross_host_bytes}};
    std::ofstream(options_.metrics_log, std::ios::app) << line.dump() << "\n";
  }
}

Status StopConditions::Check() const {
  // The deadline first: gRPC also reports a call past its deadline as cancelled.
  if (std::chrono::steady_clock::now() >= deadline) {
    return DeadlineExceededError("deadline exceeded");
  }
  if (cancelled && cancelled()) return Status(StatusCode::kCancelled, "cancelled");
  return OkStatus();
}

StatusOr<std::vector<StepMetrics>> TrainingJob::Step(int steps,
                                                     const std::optional<at::Tensor>& batch,
                                                     const StopConditions& stop) {
  MutexLock lock(&mu_);
  CHORUS_RETURN_IF_ERROR(CheckOpen());
  std::vector<StepMetrics> done;
  const int count = batch ? 1 : steps;
  for (int i = 0; i < count; ++i) {
    if (Status stopped = stop.Check(); !stopped.ok()) {
      return stopped.Annotate("training job " + options_.id + " stopped after " +
                              std::to_string(i) + " of " + std::to_string(count) + " steps");
    }
    auto start = std::chrono::steady_clock::now();
    const int64_t sent_before = CrossHostBytes();
    CHORUS_ASSIGN_OR_RETURN(
        std::vector<c10::IValue> results, RunOnRanks("step", [&](int) {
          return std::vector<c10::IValue>{batch ? c10::IValue(*batch) : c10::IValue()};
        }));
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    StepMetrics metrics;
    double tokens = 0, flops_per_token = 0;
    for (const c10::IValue& result : results) {
      CHORUS_ASSIGN_OR_RETURN(double rank_tokens, NumberIn(result, "tokens"));
      CHORUS_ASSIGN_OR_RETURN(flops_per_token, NumberIn(result, "flops_per_token"));
      CHORUS_ASSIGN_OR_RETURN(double memory, NumberIn(result, "memory_mib"));
      tokens += rank_tokens;
      metrics.memory_mib = std::max(metrics.memory_mib, memory);
    }
    CHORUS_ASSIGN_OR_RETURN(double step, NumberIn(results[0], "step"));
    metrics.step = static_cast<int64_t>(step);
    CHORUS_ASSIGN_OR_RETURN(metrics.loss, NumberIn(results[0], "loss"));
    CHORUS_ASSIGN_OR_RETURN(metrics.lr, NumberIn(results[0], "lr"));
    metrics.step_seconds = wall;
    // Tensor-parallel ranks of a group process the same tokens; every host
    // as many as this one.
    const double unique_tokens = tokens / options_.tp * options_.hosts;
    metrics.tokens_per_second = unique_tokens / wall;
    metrics.tokens_per_second_per_rank = metrics.tokens_per_second / global_world_size();
    metrics.mfu_pct = 100.0 * metrics.tokens_per_second * flops_per_token /
                      (options_.peak_flops_per_rank * global_world_size());
    metrics.cross_host_bytes = CrossHostBytes() - sent_before;
    Record(metrics);
    done.push_back(metrics);
    const int64_t interval = options_.checkpoint_interval;
    if (interval > 0 && !options_.checkpoint_dir.empty() && metrics.step % interval == 0) {
      StatusOr<std::string> saved = SaveLocked(options_.checkpoint_dir);
      if (!saved.ok()) {
        return saved.status().Annotate("training job " + options_.id + ": step " +
                                       std::to_string(metrics.step) + " ran, its checkpoint");
      }
    }
  }
  return done;
}

StatusOr<at::Tensor> TrainingJob::Evaluate(const at::Tensor& tokens) {
  MutexLock lock(&mu_);
  CHORUS_RETURN_IF_ERROR(CheckOpen());
  CHORUS_ASSIGN_OR_RETURN(std::vector<c10::IValue> results, RunOnRanks("evaluate", [&](int) {
                            return std::vector<c10::IValue>{tokens};
                          }));
  if (!results[0].isTensor()) {
    return InternalError("chorus.training.trainer.evaluate returned a " + results[0].tagKind() +
                         ", not a tensor");
  }
  return results[0].toTensor();
}

Status TrainingJob::Export(const std::string& path, const std::string& name, int64_t version,
                           int64_t example_length) {
  MutexLock lock(&mu_);
  CHORUS_RETURN_IF_ERROR(CheckOpen());
  return RunOnRanks("export",
                    [&](int) {
                      return std::vector<c10::IValue>{path, name, version, example_length};
                    })
      .status();
}

std::vector<StepMetrics> TrainingJob::History() const {
  MutexLock lock(&history_mu_);
  return history_;
}

int64_t TrainingJob::CurrentStep() const {
  MutexLock lock(&history_mu_);
  return step_;
}

int TrainingJob::Subscribe(std::function<void(const StepMetrics&)> listener,
                           std::function<void()> closed) {
  int id;
  bool already_closed;
  {
    MutexLock lock(&history_mu_);
    id = next_listener_++;
    already_closed = closed_;
    listeners_.push_back({id, std::move(listener), closed});
  }
  if (already_closed) closed();
  return id;
}

void TrainingJob::Unsubscribe(int id) {
  {
    MutexLock lock(&history_mu_);
    listeners_.erase(std::remove_if(listeners_.begin(), listeners_.end(),
                                    [id](const Listener& l) { return l.id == id; }),
                     listeners_.end());
  }
  unsubscribed_.SignalAll();
}

void TrainingJob::Close(std::chrono::milliseconds timeout) {
  std::vector<std::function<void()>> notify;
  {
    MutexLock lock(&history_mu_);
    closed_ = true;
    for (const Listener& listener : listeners_) notify.push_back(listener.closed);
  }
  for (const auto& closed : notify) closed();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&history_mu_);
  while (!listeners_.empty() && std::chrono::steady_clock::now() < deadline) {
    unsubscribed_.WaitUntil(&history_mu_, deadline);
  }
}

}  // namespace chorus
