// The models a server serves and the lifecycle of each: the repository's
// folders (repository_layout.h) loaded (model_loader.h) onto the server's
// interpreters, each version of a model in one state (model_state.h), with
// why it does not serve; the versions that serve are those the model's
// version policy names (Triton's latest N, all, specific). Loads and unloads
// happen while other models serve; a failed reload keeps the versions that
// were serving; a replaced or unloaded version drains. Thread-safe.
#ifndef CHORUS_SERVER_MODELS_MODEL_REPOSITORY_H_
#define CHORUS_SERVER_MODELS_MODEL_REPOSITORY_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chorus/common/file_util.h"
#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/placement.h"
#include "chorus/server/models/loaded_model.h"
#include "chorus/server/models/model_loader.h"
#include "chorus/server/models/model_state.h"
#include "chorus/server/models/repository_layout.h"

namespace chorus {

struct RepositoryOptions : ModelLoaderOptions {
  std::chrono::milliseconds drain_timeout{30000};  // for unloads and replaced versions
  // Models LoadAll leaves out (model -> why: the supervisor's quarantine); an
  // explicit Load of one re-admits it.
  std::map<std::string, std::string> quarantined;
  // Triton's --model-config-name: a model folder's config is
  // configs/<config_name>.pbtxt where the folder has that file, else its own
  // config.pbtxt or config.json ("": always the latter).
  std::string config_name;
};

// What a load call gives beside the model's name (Triton's load parameters
// "config" and "file:<path>"), for that load only: a later load without it
// reads the model's folder again.
struct ModelOverride {
  // Triton's ModelConfig in its JSON form, in place of the folder's
  // config.pbtxt or config.json ("": the folder's); it names the model or none.
  std::string config_json;
  // Path within the model's folder ("1/model.py") -> contents. Given, the
  // model is served from a private folder holding only these files (never
  // written into the repository), removed once none of its versions is
  // loaded. Needs config_json.
  std::map<std::string, std::string> files;
};

// One line of the repository index: one version of a model, or the model
// itself when no version is listed (not loaded, failed before any version
// was tried, quarantined).
struct RepositoryEntry {
  std::string name;
  std::string version;  // "" for the model itself
  ModelState state = ModelState::kUnavailable;
  std::string reason;  // why not kReady
};

class ModelRepository {
 public:
  // `placement` outlives the repository.
  ModelRepository(std::string root, InterpreterPlacement* placement, RepositoryOptions options);
  // Unloads everything (queued requests fail, running ones finish).
  ~ModelRepository();

  const RepositoryLayout& layout() const { return layout_; }

  // Loads every model under the root. A model that fails, or is quarantined,
  // is listed UNAVAILABLE with the reason; the others serve. Errors:
  // unreadable root.
  Status LoadAll() CHORUS_EXCLUDES(mu_);
  // Loads (or reloads) the versions of `name` its config's version_policy
  // names (by default the highest), re-admitting it if it was quarantined;
  // for an ensemble, first the models of its steps that do not serve. All or
  // nothing: when a version fails, what was serving keeps serving, and
  // versions the policy no longer names are unloaded only when all loaded.
  // `override` replaces the folder's config and files for this load. Errors
  // (Triton's text first, then chorus' reason): INVALID_ARGUMENT "Load
  // parameter 'config' must be specified for model file override"; "failed
  // to load '<name>', failed to poll from model repository: ..." (no such
  // folder: NOT_FOUND; its config unreadable or refused); "load failed for
  // model '<name>': at least one version must be available under the version
  // policy of model '<name>' ..."; "load failed for model '<name>': version
  // <v> is at UNAVAILABLE state: <why>" (a version failed, with its code).
  // Blocks while the model loads: not for reactors.
  Status Load(const std::string& name, const ModelOverride& override = {}) CHORUS_EXCLUDES(mu_);
  // One pass of repository polling (Triton's poll mode): loads a model folder
  // that is new or whose files changed since its last load (a new version, a
  // new config.json, a replaced file), unloads one whose folder is gone.
  // Quarantined models are left alone. Blocks while models load.
  void Poll() CHORUS_EXCLUDES(mu_);
  // Stops serving every version of `name`: new requests get NOT_FOUND, queued
  // and running ones finish (up to the drain timeout). NOT_FOUND if nothing
  // of it is loaded (one whose load failed: OK, its error forgotten). Blocks.
  Status Unload(const std::string& name) CHORUS_EXCLUDES(mu_);
  // Unloads `name` (drained) and refuses it with `why` until an explicit Load
  // re-admits it: the supervisor's quarantine, arriving while it serves. Blocks.
  void Quarantine(const std::string& name, const std::string& why) CHORUS_EXCLUDES(mu_);
  // Writes a new version of `name` through `write` (RepositoryLayout::Publish:
  // it appears whole) and loads it. Blocks.
  StatusOr<PublishedVersion> Publish(const std::string& name, int64_t version,
                                     const RepositoryLayout::VersionWriter& write)
      CHORUS_EXCLUDES(mu_);

  // Version `version` of `name` as it serves; "": the highest version that
  // serves. Errors, Triton's text first: NOT_FOUND "Request for unknown
  // model: '<name>' is not found" (never loaded, or not in the repository),
  // "... version <v> is not found" (a version not loaded), "... has no
  // available versions" (unloaded); UNAVAILABLE "... has no available
  // versions: <why>" (being loaded, failed, quarantined), "... version <v> is
  // not at ready state" (that version being loaded, failed or unloaded).
  StatusOr<std::shared_ptr<LoadedModel>> Find(const std::string& name,
                                              const std::string& version) const
      CHORUS_EXCLUDES(mu_);
  // The versions of `name` that serve, in ascending order.
  std::vector<std::string> ReadyVersions(const std::string& name) const CHORUS_EXCLUDES(mu_);
  // Every version that serves, of every model.
  std::vector<std::shared_ptr<LoadedModel>> Loaded() const CHORUS_EXCLUDES(mu_);
  // Every model folder of the root (and model loaded from a load call's
  // files), each version loaded or tried with its state, by name and version.
  std::vector<RepositoryEntry> Index() const CHORUS_EXCLUDES(mu_);
  // Whether no model that was asked to serve failed to (quarantined ones
  // aside): strict readiness.
  bool AllLoaded() const CHORUS_EXCLUDES(mu_);
  // Drains every model's queue until `deadline` (server shutdown).
  void DrainAll(std::chrono::steady_clock::time_point deadline) CHORUS_EXCLUDES(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  // One version of a model.
  struct Slot {
    ModelState state = ModelState::kLoading;
    std::shared_ptr<LoadedModel> model;  // set when kReady
    std::string reason;                  // why not kReady
    // The private folder of the load call's files it serves from, if any.
    std::shared_ptr<const ScopedTempDir> files;
  };
  // A model's place in its life.
  struct Record {
    std::map<int64_t, Slot> versions;  // each version loaded or tried, by number
    bool loading = false;              // a load is under way
    std::string failure;               // why its last load failed, while nothing serves
    std::string quarantine;            // the supervisor's why; Load re-admits
    int quarantines = 0;               // times quarantined: a load across one is dropped
    std::string fingerprint;           // the folder's files at its last load
  };
  // What one load loads: the config and the versions it names.
  struct LoadPlan {
    ModelConfig config;
    std::map<int64_t, std::string> versions;     // number -> folder name
    bool has_version_folders = false;            // whether the policy had any to choose from
    std::shared_ptr<const ScopedTempDir> files;  // the override's private folder
  };
  // A version's load: what it gave.
  struct Outcome {
    int64_t version;
    StatusOr<std::shared_ptr<LoadedModel>> loaded;
  };
  // A version taken out of service, drained by whoever took it: at once
  // (`served` false: it never served) or within the drain timeout.
  struct Retired {
    Slot slot;
    bool served;
  };

  // Load, or (`readmit` false: the repository's own loads, start-up, polling,
  // an ensemble's steps) UNAVAILABLE for a quarantined model.
  Status LoadModel(const std::string& name, bool readmit, const ModelOverride& override = {})
      CHORUS_EXCLUDES(mu_);
  // Marks `name` loading; returns its quarantine count, or why it is not
  // loaded (no folder and no files: NOT_FOUND; quarantined, not `readmit`).
  StatusOr<int> BeginLoad(const std::string& name, bool readmit, bool has_files)
      CHORUS_EXCLUDES(mu_);
  // The config (the override's, or the folder's) and versions of a load.
  StatusOr<LoadPlan> Plan(const std::string& name, const ModelOverride& override) const;
  // The config of `name`'s folder (RepositoryOptions::config_name, else
  // config.pbtxt or config.json).
  StatusOr<ModelConfig> ConfigOf(const std::string& name) const;
  // Records a load of `name` that failed before any version was tried
  // (`reason`, for the index) and returns `answer`, the load's error.
  Status FailBeforeVersions(const std::string& name, const Status& reason, const Status& answer)
      CHORUS_EXCLUDES(mu_);
  // Loads each version of `plan` (from the override's folder, if any).
  std::vector<Outcome> LoadVersions(const std::string& name, const LoadPlan& plan) const;
  // Records the outcomes of `name`'s load (all or nothing), moving what it
  // takes out of service into `retired`; returns the load's result.
  // `quarantines` is the record's count when the load began: a model
  // quarantined since then serves nothing of it.
  Status Settle(const std::string& name, const LoadPlan& plan, std::vector<Outcome> outcomes,
                int quarantines, std::vector<Retired>* retired) CHORUS_EXCLUDES(mu_);
  // Settle's two ends: a version failed (`failed`), or every one loaded.
  Status SettleFailed(const std::string& name, Record& record, const Outcome& failed,
                      std::vector<Outcome>& outcomes, std::vector<Retired>* retired)
      CHORUS_REQUIRES(mu_);
  void SettleLoaded(const std::string& name, Record& record, const LoadPlan& plan,
                    std::vector<Outcome>& outcomes, std::vector<Retired>* retired)
      CHORUS_REQUIRES(mu_);
  // Drains what `retired` holds, then lets it go (its private folder with it).
  void Drain(std::vector<Retired> retired) const;
  // For an ensemble of `config`: loads the models of its steps that do not
  // serve yet (Triton's: loading an ensemble loads what it is made of).
  void LoadSteps(const std::string& name, const ModelConfig& config, int depth = 0)
      CHORUS_EXCLUDES(mu_);
  // Loads `names`, ensembles after the models their steps name.
  void LoadInOrder(const std::vector<std::string>& names) CHORUS_EXCLUDES(mu_);
  // What Poll compares: every file under the model's folder, with its size and time.
  std::string Fingerprint(const std::string& name) const;
  // The Find error of a model that has no version ready.
  static Status NoVersionReady(const std::string& name, const std::string& version,
                               const Record& record);

  const RepositoryLayout layout_;
  const RepositoryOptions options_;
  InterpreterPlacement* const placement_;
  const ModelLoader loader_;
  mutable Mutex mu_;
  std::map<std::string, Record> records_ CHORUS_GUARDED_BY(mu_);
};

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_MODEL_REPOSITORY_H_
