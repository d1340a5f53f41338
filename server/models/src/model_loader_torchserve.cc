// ModelLoader's TorchServe models (model_loader.h): a version folder holding
// a .mar archive's files, served by workers of its handler
// (chorus/server/torchserve) with the archive's model-config.yaml mapped onto
// chorus' scheduling: minWorkers workers (a config's instance count wins; by
// default default_workers_per_model, else one per interpreter, as
// TorchServe's default is one per core),
// batches of batchSize requests gathered for up to maxBatchDelay (a config's
// max_batch_size and queue delay win: the management API's load).
#include <algorithm>
#include <filesystem>
#include <optional>

#include "chorus/common/file_util.h"
#include "chorus/server/config/torchserve_manifest.h"
#include "chorus/server/torchserve/torchserve_model.h"
#include "server/models/src/model_loader_internal.h"

namespace chorus {
namespace {

constexpr char kManifestPath[] = "MAR-INF/MANIFEST.json";

// TorchServe's sequence batching as chorus' (serving/sequence_batcher.h):
// each sequence pinned to one worker, its requests one at a time; a request
// of a sequence not active starts it, one naming none starts a new one
// ("ts-seq-<uuid>", as TorchServe names them).
StatusOr<std::optional<SequenceBatching>> SequencesOf(const TorchServeModelSettings& settings,
                                                      const std::string& name) {
  if (!settings.sequence_batching) return std::optional<SequenceBatching>();
  if (settings.sequence_max_idle.count() <= 0) {
    // TorchServe loads such a model and answers each of its requests 503.
    return FailedPreconditionError(
        "model " + name +
        ": model-config.yaml sets sequenceBatching but no sequenceMaxIdleMSec (> 0), without "
        "which TorchServe serves none of its requests");
  }
  SequenceBatching sequences;
  sequences.strategy = SequenceStrategy::kDirect;
  sequences.max_idle = settings.sequence_max_idle;
  sequences.start_unknown = true;
  sequences.new_sequence_prefix = "ts-seq-";
  sequences.max_sequences = static_cast<size_t>(std::max(1, settings.max_sequences));
  sequences.max_waiting_per_sequence = static_cast<size_t>(std::max(1, settings.max_waiting));
  return std::optional<SequenceBatching>(std::move(sequences));
}

}  // namespace

bool ModelLoader::IsTorchServe(const ModelConfig& config, const std::string& name,
                               const std::string& version) const {
  // A load's override may give Triton's config (workers, batching); one that
  // names a backend or platform is that kind of model.
  const bool names_kind =
      config.triton && (!config.triton->backend().empty() || !config.triton->platform().empty());
  if (config.format || config.ensemble || config.python_backend || names_kind) return false;
  std::error_code error;
  return std::filesystem::is_regular_file(
      layout_->ModelDir(name) + "/" + version + "/" + kManifestPath, error);
}

StatusOr<std::shared_ptr<LoadedModel>> ModelLoader::LoadTorchServe(
    const std::string& name, const std::string& version, const ModelConfig& config) const {
  std::error_code error;
  // The archive's own folder (a model store's entry is linked in): the
  // handler's model_dir, as TorchServe gives it.
  const std::string model_dir =
      std::filesystem::canonical(layout_->ModelDir(name) + "/" + version, error).string();
  if (error) return NotFoundError("model " + name + " version " + version + ": " + error.message());
  CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFile(model_dir + "/" + kManifestPath));
  CHORUS_ASSIGN_OR_RETURN(TorchServeManifest manifest, ParseTorchServeManifest(text));
  const auto given = options_.torchserve_settings.find(name);
  CHORUS_ASSIGN_OR_RETURN(TorchServeModelSettings settings,
                          TorchServeModel::ReadSettings(placement_->manager(), model_dir, manifest,
                                                        given == options_.torchserve_settings.end()
                                                            ? options_.torchserve_defaults
                                                            : given->second));
  TorchServeModelOptions options;
  options.model_name = name;
  options.version = version;
  options.model_dir = model_dir;
  options.manifest = std::move(manifest);
  if (!options_.torchserve_service_envelope.empty()) {  // TorchServe's service_envelope wins
    options.manifest.envelope = options_.torchserve_service_envelope;
  }
  options.workers = config.instance_count() > 0 ? config.instance_count()
                    : settings.min_workers > 0  ? settings.min_workers
                                                : placement_->manager()->size();
  if (options.workers > kMaxTorchServeWorkers) {
    return InvalidArgumentError("model " + name + " asks for " + std::to_string(options.workers) +
                                " workers; chorus runs at most " +
                                std::to_string(kMaxTorchServeWorkers) +
                                " (each is a handler object in this process)");
  }
  // A load's config (the management API's batch_size, max_batch_delay) wins.
  if (config.max_batch_size.value_or(0) > 0) settings.batch_size = *config.max_batch_size;
  if (config.max_queue_delay) {
    settings.max_batch_delay =
        std::chrono::duration_cast<std::chrono::milliseconds>(*config.max_queue_delay);
  }
  options.batch_size = settings.batch_size;
  options.load_timeout = options_.load_timeout;
  options.response_timeout = settings.response_timeout;
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<TorchServeModel> model,
                          TorchServeModel::Load(placement_, options));
  Manifest signature = TorchServeSignature(name, version, settings.batch_size);
  SchedulerOptions scheduling = model_loader::SchedulingFor(config, signature, options_);
  scheduling.workers = model->instances();
  scheduling.batching.max_batch_size = settings.batch_size;
  scheduling.batching.enabled = settings.batch_size > 1;
  scheduling.batching.max_queue_delay = settings.max_batch_delay;
  scheduling.label = CrashLabel::Model(name, version);
  LoadedModelParts parts;
  CHORUS_ASSIGN_OR_RETURN(parts.sequences, SequencesOf(settings, name));
  return std::make_shared<LoadedModel>(name, version, std::move(model), "torchserve",
                                       std::move(signature), scheduling, std::move(parts));
}

}  // namespace chorus
