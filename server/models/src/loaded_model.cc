#include "chorus/server/models/loaded_model.h"

#include <utility>

#include "chorus/common/logging.h"

namespace chorus {

LoadedModel::LoadedModel(std::string name, std::string version, std::shared_ptr<Model> model,
                         const SchedulerOptions& options,
                         std::unique_ptr<GenerationEngines> generation,
                         TensorAnnotations annotations)
    : name_(std::move(name)),
      version_(std::move(version)),
      model_(std::move(model)),
      scheduling_(options),
      annotations_(std::move(annotations)),
      generation_(std::move(generation)) {
  scheduler_ = std::make_unique<ModelScheduler>(
      model_, options, [this](const ExecutionStats& stats) { RecordExecution(stats); });
}

LoadedModel::~LoadedModel() {
  generation_.reset();
  scheduler_.reset();
}

void LoadedModel::Drain(std::chrono::steady_clock::time_point deadline) {
  if (generation_ && !generation_->Drain(deadline)) {
    Log().warn("model {}: generations still running at the drain deadline are cut short", name_);
  }
  scheduler_->Drain(deadline);
}

void LoadedModel::RecordExecution(const ExecutionStats& stats) {
  MutexLock lock(&mu_);
  if (!stats.ok) return;
  stats_.execution_count += 1;
  stats_.inference_count += stats.batch_size;
  auto& batch = stats_.batches[stats.batch_size];
  batch.count += 1;
  batch.ns += stats.compute_time.count();
  stats_.compute_infer.count += 1;
  stats_.compute_infer.ns += stats.compute_time.count();
}

void LoadedModel::RecordRequest(const InferenceResult& result, std::chrono::nanoseconds total) {
  MutexLock lock(&mu_);
  auto& bucket = result.status.ok() ? stats_.success : stats_.fail;
  bucket.count += 1;
  bucket.ns += total.count();
  stats_.queue.count += 1;
  stats_.queue.ns += result.queue_time.count();
  stats_.last_inference_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
}

ModelStatsSnapshot LoadedModel::Snapshot() const {
  ModelStatsSnapshot snapshot;
  {
    MutexLock lock(&mu_);
    snapshot = stats_;
  }
  snapshot.pending = scheduler_->pending();
  return snapshot;
}

}  // namespace chorus
