#include "chorus/server/training/job_metrics.h"

#include <deque>
#include <sstream>
#include <utility>
#include <vector>

#include "chorus/common/prometheus.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/server/rpc/grpc_status.h"
#include "chorus/server/training/job_proto.h"

namespace chorus {
namespace {

// Sends one message at a time; a step arriving meanwhile waits in `pending_`.
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
    MetricsToProto(job_id_, pending_.front(), &message_);
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

class RefusedStream final : public grpc::ServerWriteReactor<training::StepMetrics> {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

template <typename Value>
void AppendGauge(std::ostream& out, const char* name, const char* help,
                 const std::vector<std::pair<std::string, StepMetrics>>& last, Value value) {
  AppendMetricHeader(out, name, "gauge", help);
  for (const auto& [id, m] : last) out << name << "{job=\"" << id << "\"} " << value(m) << "\n";
}

}  // namespace

std::string RenderJobMetrics(const JobRegistry& jobs) {
  std::vector<std::pair<std::string, StepMetrics>> last;
  for (const auto& [id, entry] : jobs.List()) {
    auto history = entry->job->History();
    if (!history.empty()) last.emplace_back(id, history.back());
  }
  std::ostringstream out;
  using M = const StepMetrics&;
  AppendGauge(out, "chorus_training_step", "Last completed step", last, [](M m) { return m.step; });
  AppendGauge(out, "chorus_training_loss", "Loss of the last step", last,
              [](M m) { return m.loss; });
  AppendGauge(out, "chorus_training_step_seconds", "Duration of the last step", last,
              [](M m) { return m.step_seconds; });
  AppendGauge(out, "chorus_training_tokens_per_second", "Tokens per second, all ranks", last,
              [](M m) { return m.tokens_per_second; });
  AppendGauge(out, "chorus_training_tokens_per_second_per_rank", "Tokens per second, one rank",
              last, [](M m) { return m.tokens_per_second_per_rank; });
  AppendGauge(out, "chorus_training_mfu_pct", "Model FLOPs utilization, percent", last,
              [](M m) { return m.mfu_pct; });
  AppendGauge(out, "chorus_training_memory_mib", "Peak memory of the busiest rank, MiB", last,
              [](M m) { return m.memory_mib; });
  AppendGauge(out, "chorus_training_cross_host_bytes_per_host",
              "Bytes each host sent the others in the last step (jobs across servers)", last,
              [](M m) { return m.cross_host_bytes; });
  return out.str();
}

grpc::ServerWriteReactor<training::StepMetrics>* NewMetricsStream(std::shared_ptr<JobEntry> entry,
                                                                  std::string job_id,
                                                                  int64_t from_step) {
  return new MetricsStream(std::move(entry), std::move(job_id), from_step);
}

grpc::ServerWriteReactor<training::StepMetrics>* RefusedMetricsStream(const Status& status) {
  return new RefusedStream(ToGrpcStatus(status));
}

}  // namespace chorus
