// The models a server serves and the lifecycle of each: the repository's
// folders (repository_layout.h) loaded (model_loader.h) onto the server's
// interpreters, each model in one state (model_state.h) with the version it
// serves and why it does not. Loads and unloads happen while other models
// serve; a failed reload keeps the version that was serving; a replaced or
// unloaded version drains. Thread-safe.
#ifndef CHORUS_SERVER_MODELS_MODEL_REPOSITORY_H_
#define CHORUS_SERVER_MODELS_MODEL_REPOSITORY_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

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
};

// One line of the repository index.
struct RepositoryEntry {
  std::string name;
  std::string version;  // the one serving ("" when none)
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
  // Loads (or reloads) the highest version of `name`, re-admitting it if it
  // was quarantined; for an ensemble, first the models of its steps that do
  // not serve. On failure whatever was serving keeps serving. Blocks
  // while the model loads: not for reactors.
  Status Load(const std::string& name) CHORUS_EXCLUDES(mu_);
  // One pass of repository polling (Triton's poll mode): loads a model folder
  // that is new or whose files changed since its last load (a new version, a
  // new config.json, a replaced file), unloads one whose folder is gone.
  // Quarantined models are left alone. Blocks while models load.
  void Poll() CHORUS_EXCLUDES(mu_);
  // Stops serving `name`: new requests get NOT_FOUND, queued and running ones
  // finish (up to the drain timeout). NOT_FOUND if it is not loaded. Blocks.
  Status Unload(const std::string& name) CHORUS_EXCLUDES(mu_);
  // Unloads `name` (drained) and refuses it with `why` until an explicit Load
  // re-admits it: the supervisor's quarantine, arriving while it serves. Blocks.
  void Quarantine(const std::string& name, const std::string& why) CHORUS_EXCLUDES(mu_);
  // Writes a new version of `name` through `write` (RepositoryLayout::Publish:
  // it appears whole) and loads it. Blocks.
  StatusOr<PublishedVersion> Publish(const std::string& name, int64_t version,
                                     const RepositoryLayout::VersionWriter& write)
      CHORUS_EXCLUDES(mu_);

  // The loaded model; `version` "" means the served one. UNAVAILABLE (with the
  // reason) for a model being loaded, failed or quarantined; NOT_FOUND otherwise.
  StatusOr<std::shared_ptr<LoadedModel>> Find(const std::string& name,
                                              const std::string& version) const
      CHORUS_EXCLUDES(mu_);
  std::vector<std::shared_ptr<LoadedModel>> Loaded() const CHORUS_EXCLUDES(mu_);
  // Every model folder of the root, with its state.
  std::vector<RepositoryEntry> Index() const CHORUS_EXCLUDES(mu_);
  // Whether no model that was asked to serve failed to (quarantined ones
  // aside): strict readiness.
  bool AllLoaded() const CHORUS_EXCLUDES(mu_);
  // Drains every model's queue until `deadline` (server shutdown).
  void DrainAll(std::chrono::steady_clock::time_point deadline) CHORUS_EXCLUDES(mu_);

 private:
  // A model's place in its life.
  struct Record {
    ModelState state = ModelState::kUnavailable;
    std::shared_ptr<LoadedModel> serving;  // set when kReady
    std::string failure;                   // why its last load failed, while nothing serves
    std::string quarantine;                // the supervisor's why; Load re-admits
    int quarantines = 0;                   // times quarantined: a load across one is dropped
    std::string files;                     // the folder's fingerprint at its last load
  };
  // Load, or (`readmit` false: the repository's own loads, start-up, polling,
  // an ensemble's steps) UNAVAILABLE for a quarantined model.
  Status LoadModel(const std::string& name, bool readmit) CHORUS_EXCLUDES(mu_);
  // For an ensemble `name`: loads the models of its steps that do not serve
  // yet (Triton's: loading an ensemble loads what it is made of).
  void LoadSteps(const std::string& name, int depth = 0) CHORUS_EXCLUDES(mu_);
  // Loads `names`, ensembles after the models their steps name.
  void LoadInOrder(const std::vector<std::string>& names) CHORUS_EXCLUDES(mu_);
  // What Poll compares: every file under the model's folder, with its size and time.
  std::string Fingerprint(const std::string& name) const;
  // Records `loaded` (or its failure) as `name`'s outcome; returns the
  // version it replaced, which the caller drains, or `loaded` itself, not
  // served, if the model was quarantined since the load began (`quarantines`
  // is the record's count then).
  std::shared_ptr<LoadedModel> Settle(const std::string& name,
                                      const StatusOr<std::shared_ptr<LoadedModel>>& loaded,
                                      int quarantines) CHORUS_EXCLUDES(mu_);

  const RepositoryLayout layout_;
  const RepositoryOptions options_;
  const ModelLoader loader_;
  mutable Mutex mu_;
  std::map<std::string, Record> records_ CHORUS_GUARDED_BY(mu_);
};

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_MODEL_REPOSITORY_H_
