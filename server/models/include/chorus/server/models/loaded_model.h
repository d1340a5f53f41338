// One version of a model as it serves: the model, its scheduler (and, for a
// generative model, its generation engines), how it is scheduled and its
// statistics (Triton's).
#ifndef CHORUS_SERVER_MODELS_LOADED_MODEL_H_
#define CHORUS_SERVER_MODELS_LOADED_MODEL_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "chorus/common/thread_annotations.h"
#include "chorus/package/model.h"
#include "chorus/server/config/model_config.h"
#include "chorus/server/models/classification.h"
#include "chorus/server/models/ensemble.h"
#include "chorus/server/python_backend/python_backend_model.h"
#include "chorus/serving/generation_engines.h"
#include "chorus/serving/scheduler.h"
#include "chorus/serving/sequence_batcher.h"

namespace chorus {

// Cumulative statistics of one loaded model version.
struct ModelStatsSnapshot {
  struct Duration {
    uint64_t count = 0;
    uint64_t ns = 0;
  };
  Duration success, fail, queue, compute_infer;
  // Time decoding requests' tensors from the wire and encoding their answers,
  // outside the model's runs (reported with compute_infer's count: Triton's rule).
  uint64_t compute_input_ns = 0, compute_output_ns = 0;
  Duration cache_hit, cache_miss;  // requests answered from / not found in the response cache
  uint64_t inference_count = 0;    // samples
  uint64_t execution_count = 0;    // model runs
  uint64_t last_inference_ms = 0;
  std::map<int64_t, Duration> batches;  // by batch size: executions and their compute
  size_t pending = 0;
};

// What a model's config.json says of its tensors beyond the signature,
// checked against it when the model loaded.
struct TensorAnnotations {
  std::map<std::string, InputFormat> input_formats;  // by input
  OutputLabelsMap output_labels;                     // by output
  // Triton's reshape (without the batch dimension): the shape the model
  // takes of an input, or gives of an output, where clients see the signature's.
  std::map<std::string, std::vector<int64_t>> input_reshapes;
  std::map<std::string, std::vector<int64_t>> output_reshapes;
};

// What serves a model beside its request scheduler, all optional.
struct LoadedModelParts {
  // A generative model's engines: its requests for text go there.
  std::unique_ptr<GenerationEngines> generation;
  TensorAnnotations annotations;
  // A stateful model: its requests go through a sequence batcher (checked
  // with SequenceBatcher::ClientSignature before).
  std::optional<SequenceBatching> sequences;
  // Its answers go to the server's response cache (config "response_cache").
  bool response_cache = false;
  // Loaded from a config.pbtxt: that config, normalized (what ModelConfig answers).
  std::shared_ptr<const inference::ModelConfig> triton_config;
};

class LoadedModel {
 public:
  LoadedModel(std::string name, std::string version, std::shared_ptr<Model> model,
              const SchedulerOptions& options, LoadedModelParts parts = {});
  // A model of signature `signature` that answers its requests itself (a
  // Triton Python-backend model, a TorchServe model): its scheduler hands
  // batches to `executor`'s instances. `platform` is Triton's name for it.
  LoadedModel(std::string name, std::string version, std::shared_ptr<RequestExecutor> executor,
              std::string platform, Manifest signature, const SchedulerOptions& options,
              LoadedModelParts parts);
  // An ensemble of signature `signature`: its requests run through `ensemble`'s
  // steps; no model file, no scheduler of its own.
  LoadedModel(std::string name, std::string version, std::shared_ptr<const Ensemble> ensemble,
              Manifest signature, const SchedulerOptions& options,
              std::shared_ptr<const inference::ModelConfig> triton_config = nullptr,
              TensorAnnotations annotations = {});
  // Fails what is queued, lets what runs finish.
  ~LoadedModel();
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  // The model its file holds; nullptr for an ensemble and a request executor.
  const Model* model() const { return model_.get(); }
  // The model that answers its requests itself; nullptr for others.
  RequestExecutor* executor() const { return executor_.get(); }
  // The Python-backend model it is; nullptr for others.
  PythonBackendModel* python_backend() const {
    return dynamic_cast<PythonBackendModel*>(executor_.get());
  }
  // The config.pbtxt it was loaded from, normalized; nullptr for config.json's.
  const std::shared_ptr<const inference::ModelConfig>& triton_config() const {
    return triton_config_;
  }
  // The ensemble it is; nullptr for a model with a file.
  const std::shared_ptr<const Ensemble>& ensemble() const { return ensemble_; }
  // Triton's platform name ("pytorch_libtorch", "ensemble", ...).
  std::string platform() const;
  // The signature clients see: the model's, less a stateful model's control
  // and state tensors (which chorus fills in).
  const Manifest& manifest() const { return manifest_; }
  // How it is scheduled (batching, workers, queue), as loaded.
  const SchedulerOptions& scheduling() const { return scheduling_; }
  // Input formats and output labels, as loaded.
  const TensorAnnotations& annotations() const { return annotations_; }
  // Whether its answers may come from the response cache.
  bool response_cache() const { return response_cache_; }
  // Unique to this load in the process (response cache keys never outlive it).
  uint64_t serial() const { return serial_; }
  // Where requests go: the scheduler, or for a stateful model the sequence
  // batcher (sequences() non-null, scheduler() then unusable), or for an
  // ensemble its steps (ensemble() non-null, no scheduler).
  ModelScheduler& scheduler() { return *scheduler_; }
  SequenceBatcher* sequences() { return sequences_.get(); }
  const SequenceBatcher* sequences() const { return sequences_.get(); }
  // The generation engines of a generative model; nullptr for others.
  GenerationEngines* generation() { return generation_.get(); }
  // Takes no new requests and waits for those queued or running (model calls
  // and generations) until `deadline`. Thread-safe.
  void Drain(std::chrono::steady_clock::time_point deadline);

  // Records one answered request (from the server's completion path), with
  // the time spent decoding its inputs and encoding its outputs, if it did.
  void RecordRequest(const InferenceResult& result, std::chrono::nanoseconds total,
                     std::chrono::nanoseconds decoding = {}, std::chrono::nanoseconds encoding = {})
      CHORUS_EXCLUDES(mu_);
  ModelStatsSnapshot Snapshot() const CHORUS_EXCLUDES(mu_);
  // Records a request answered from the response cache (`hit`; also a
  // success) or one not found there, with the cache's time on it.
  void RecordCache(bool hit, std::chrono::nanoseconds spent) CHORUS_EXCLUDES(mu_);

 private:
  void RecordExecution(const ExecutionStats& stats) CHORUS_EXCLUDES(mu_);

  const std::string name_;
  const std::string version_;
  const std::shared_ptr<Model> model_;
  const std::shared_ptr<RequestExecutor> executor_;
  const std::string executor_platform_;
  const std::shared_ptr<const Ensemble> ensemble_;
  const SchedulerOptions scheduling_;
  const TensorAnnotations annotations_;
  const Manifest manifest_;
  const bool response_cache_;
  const std::shared_ptr<const inference::ModelConfig> triton_config_;
  const uint64_t serial_;
  mutable Mutex mu_;
  ModelStatsSnapshot stats_ CHORUS_GUARDED_BY(mu_);
  std::unique_ptr<ModelScheduler> scheduler_;   // its workers record into stats_
  std::unique_ptr<SequenceBatcher> sequences_;  // so do its lanes
  std::unique_ptr<GenerationEngines> generation_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_LOADED_MODEL_H_
