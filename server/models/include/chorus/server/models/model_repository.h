// The models a server serves: a Triton-style repository on disk,
//   <root>/<model>/<version>/<file>.pt    (versions are integers; the highest
//   <root>/<model>/config.json            is served; config.json: model_config.h)
// loaded onto the server's interpreters, each with its scheduler and
// statistics. A file is a chorus package, or a stock torch.package or
// TorchScript file whose config gives its signature. Loads and unloads happen
// while other models serve; a failed reload keeps the version that was serving.
#ifndef CHORUS_SERVER_MODELS_MODEL_REPOSITORY_H_
#define CHORUS_SERVER_MODELS_MODEL_REPOSITORY_H_

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/package/model.h"
#include "chorus/server/models/model_config.h"
#include "chorus/serving/generation_scheduler.h"
#include "chorus/serving/scheduler.h"

namespace chorus {

// Cumulative statistics of one loaded model version (Triton's).
struct ModelStatsSnapshot {
  struct Duration {
    uint64_t count = 0;
    uint64_t ns = 0;
  };
  Duration success, fail, queue, compute_infer;
  uint64_t inference_count = 0;  // samples
  uint64_t execution_count = 0;  // model runs
  uint64_t last_inference_ms = 0;
  std::map<int64_t, Duration> batches;  // by batch size: executions and their compute
  size_t pending = 0;
};

class LoadedModel {
 public:
  // With `generation`, requests for text also go to a GenerationScheduler on
  // `manager` (which outlives this).
  LoadedModel(std::string name, std::string version, std::shared_ptr<Model> model,
              const SchedulerOptions& options, InterpreterManager* manager = nullptr,
              std::optional<GenerationOptions> generation = std::nullopt);
  ~LoadedModel();

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const Model& model() const { return *model_; }
  const Manifest& manifest() const { return *model_->manifest(); }
  // How it is scheduled (batching, workers, queue), as loaded.
  const SchedulerOptions& scheduling() const { return scheduling_; }
  ModelScheduler& scheduler() { return *scheduler_; }
  // The generation engines of a generative model; nullptr for others.
  GenerationScheduler* generation() { return generation_.get(); }
  // Takes no new requests and waits for those queued or running (model calls
  // and generations) until `deadline`. Thread-safe.
  void Drain(std::chrono::steady_clock::time_point deadline);

  // Records one answered request (from the server's completion path).
  void RecordRequest(const InferenceResult& result, std::chrono::nanoseconds total)
      CHORUS_EXCLUDES(mu_);
  ModelStatsSnapshot Snapshot() const CHORUS_EXCLUDES(mu_);

 private:
  void RecordExecution(const ExecutionStats& stats) CHORUS_EXCLUDES(mu_);

  const std::string name_;
  const std::string version_;
  const std::shared_ptr<Model> model_;
  const SchedulerOptions scheduling_;
  mutable Mutex mu_;
  ModelStatsSnapshot stats_ CHORUS_GUARDED_BY(mu_);
  std::unique_ptr<ModelScheduler> scheduler_;  // its workers record into stats_
  std::unique_ptr<GenerationScheduler> generation_;
};

struct RepositoryOptions {
  size_t max_queue = 1024;  // per model
  int workers = 1;          // per model; the server uses its interpreter count
  std::chrono::milliseconds drain_timeout{30000};  // for unloads
  // How long a model whose config.json leaves out its outputs may take to
  // answer zeros (how chorus learns them) before its load fails.
  std::chrono::milliseconds probe_timeout{60000};
  // How long making a model in an interpreter may take (ModelOptions).
  std::chrono::milliseconds load_timeout{120000};
  // Models LoadAll leaves out (model -> why: the supervisor's quarantine); an
  // explicit Load of one re-admits it.
  std::map<std::string, std::string> quarantined;
  // When set, only archives signed by one of these keys are served.
  std::shared_ptr<const TrustedKeys> trusted_keys;
};

// One line of the repository index.
struct RepositoryEntry {
  std::string name;
  std::string version;
  std::string state;   // READY or UNAVAILABLE
  std::string reason;  // why UNAVAILABLE
};

// OK if `name` can name a model (a folder of the repository root): not empty,
// no '/', not starting with '.'. INVALID_ARGUMENT naming it otherwise.
Status CheckModelName(const std::string& name);

class ModelRepository {
 public:
  // `manager` outlives the repository.
  ModelRepository(std::string root, InterpreterManager* manager, RepositoryOptions options);
  // Unloads everything (queued requests fail, running ones finish).
  ~ModelRepository();

  // Loads every model under the root. A model that fails, or is quarantined,
  // is listed UNAVAILABLE with the reason; the others serve. Errors:
  // unreadable root.
  Status LoadAll() CHORUS_EXCLUDES(mu_);
  // Loads (or reloads) the highest version of `name`, re-admitting it if it
  // was quarantined. On failure whatever was serving keeps serving. Blocks
  // while the model loads: not for reactors.
  Status Load(const std::string& name) CHORUS_EXCLUDES(mu_);
  // Stops serving `name`: new requests get NOT_FOUND, queued and running ones
  // finish (up to the drain timeout). NOT_FOUND if it is not loaded. Blocks.
  Status Unload(const std::string& name) CHORUS_EXCLUDES(mu_);

  // The loaded model; `version` "" means the served one. UNAVAILABLE (with the
  // reason) for a quarantined model, NOT_FOUND otherwise.
  StatusOr<std::shared_ptr<LoadedModel>> Find(const std::string& name,
                                              const std::string& version) const
      CHORUS_EXCLUDES(mu_);
  std::vector<std::shared_ptr<LoadedModel>> Loaded() const CHORUS_EXCLUDES(mu_);
  std::vector<RepositoryEntry> Index() const CHORUS_EXCLUDES(mu_);
  // Whether every model that was asked to load serves (quarantined ones aside):
  // strict readiness.
  bool AllLoaded() const CHORUS_EXCLUDES(mu_);
  // Drains every model's queue until `deadline` (server shutdown).
  void DrainAll(std::chrono::steady_clock::time_point deadline) CHORUS_EXCLUDES(mu_);

 private:
  StatusOr<std::shared_ptr<LoadedModel>> LoadVersion(const std::string& name);
  // The model at `path` (in `model_dir`), served as `config` says.
  StatusOr<std::shared_ptr<Model>> LoadModel(const std::string& path, const std::string& model_dir,
                                             const ModelConfig& config, const std::string& name,
                                             const std::string& version);

  const std::string root_;
  InterpreterManager* const manager_;
  const RepositoryOptions options_;
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<LoadedModel>> loaded_ CHORUS_GUARDED_BY(mu_);
  std::map<std::string, std::string> failures_ CHORUS_GUARDED_BY(mu_);     // name -> reason
  std::map<std::string, std::string> quarantined_ CHORUS_GUARDED_BY(mu_);  // name -> reason
};

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_MODEL_REPOSITORY_H_
