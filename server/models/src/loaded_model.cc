#include "chorus/server/models/loaded_model.h"

#include <atomic>
#include <utility>

#include "chorus/common/logging.h"
#include "chorus/package/format.h"

namespace chorus {

namespace {

uint64_t NextSerial() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

Manifest ServedManifest(const Model& model, const std::optional<SequenceBatching>& sequences) {
  if (!sequences) return *model.manifest();
  return SequenceBatcher::ClientSignature(*model.manifest(), *sequences).value();
}

}  // namespace

LoadedModel::LoadedModel(std::string name, std::string version, std::shared_ptr<Model> model,
                         const SchedulerOptions& options, LoadedModelParts parts)
    : name_(std::move(name)),
      version_(std::move(version)),
      model_(std::move(model)),
      scheduling_(options),
      annotations_(std::move(parts.annotations)),
      manifest_(ServedManifest(*model_, parts.sequences)),
      response_cache_(parts.response_cache),
      triton_config_(std::move(parts.triton_config)),
      serial_(NextSerial()),
      generation_(std::move(parts.generation)) {
  auto record = [this](const ExecutionStats& stats) { RecordExecution(stats); };
  if (parts.sequences) {
    sequences_ = SequenceBatcher::Create(model_, *parts.sequences, options, record).value();
  } else {
    scheduler_ = std::make_unique<ModelScheduler>(model_, options, record);
  }
}

LoadedModel::LoadedModel(std::string name, std::string version,
                         std::shared_ptr<RequestExecutor> executor, std::string platform,
                         Manifest signature, const SchedulerOptions& options,
                         LoadedModelParts parts)
    : name_(std::move(name)),
      version_(std::move(version)),
      executor_(std::move(executor)),
      executor_platform_(std::move(platform)),
      scheduling_(options),
      annotations_(std::move(parts.annotations)),
      manifest_(std::move(signature)),
      response_cache_(parts.response_cache),
      triton_config_(std::move(parts.triton_config)),
      serial_(NextSerial()) {
  auto record = [this](const ExecutionStats& stats) { RecordExecution(stats); };
  if (parts.sequences) {
    sequences_ =
        SequenceBatcher::Create(executor_, manifest_, *parts.sequences, options, record).value();
  } else {
    scheduler_ = std::make_unique<ModelScheduler>(executor_, options, record);
  }
}

LoadedModel::LoadedModel(std::string name, std::string version,
                         std::shared_ptr<const Ensemble> ensemble, Manifest signature,
                         const SchedulerOptions& options,
                         std::shared_ptr<const inference::ModelConfig> triton_config,
                         TensorAnnotations annotations)
    : name_(std::move(name)),
      version_(std::move(version)),
      ensemble_(std::move(ensemble)),
      scheduling_(options),
      annotations_(std::move(annotations)),
      manifest_(std::move(signature)),
      response_cache_(false),
      triton_config_(std::move(triton_config)),
      serial_(NextSerial()) {}

std::string LoadedModel::platform() const {
  if (ensemble_) return "ensemble";
  if (executor_) return executor_platform_;
  return FormatInfo(model_->format()).platform;
}

LoadedModel::~LoadedModel() {
  generation_.reset();
  sequences_.reset();
  scheduler_.reset();
}

void LoadedModel::Drain(std::chrono::steady_clock::time_point deadline) {
  if (generation_ && !generation_->Drain(deadline)) {
    Log().warn("model {}: generations still running at the drain deadline are cut short", name_);
  }
  if (sequences_) sequences_->Drain(deadline);
  if (scheduler_) scheduler_->Drain(deadline);
  if (executor_) executor_->Drain(deadline);  // responses its senders still owe
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

void LoadedModel::RecordRequest(const InferenceResult& result, std::chrono::nanoseconds total,
                                std::chrono::nanoseconds decoding,
                                std::chrono::nanoseconds encoding) {
  if (ensemble_ && result.status.ok()) {  // an ensemble run is its one execution
    RecordExecution({result.batch_size, 1, result.compute_time, true});
  }
  MutexLock lock(&mu_);
  auto& bucket = result.status.ok() ? stats_.success : stats_.fail;
  bucket.count += 1;
  bucket.ns += total.count();
  stats_.queue.count += 1;
  stats_.queue.ns += result.queue_time.count();
  stats_.compute_input_ns += decoding.count();
  stats_.compute_output_ns += encoding.count();
  stats_.last_inference_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
}

void LoadedModel::RecordCache(bool hit, std::chrono::nanoseconds spent) {
  MutexLock lock(&mu_);
  auto& bucket = hit ? stats_.cache_hit : stats_.cache_miss;
  bucket.count += 1;
  bucket.ns += spent.count();
}

ModelStatsSnapshot LoadedModel::Snapshot() const {
  ModelStatsSnapshot snapshot;
  {
    MutexLock lock(&mu_);
    snapshot = stats_;
  }
  snapshot.pending = sequences_   ? sequences_->pending()
                     : scheduler_ ? scheduler_->pending()
                                  : 0;  // an ensemble's requests wait in its steps' models
  return snapshot;
}

}  // namespace chorus
