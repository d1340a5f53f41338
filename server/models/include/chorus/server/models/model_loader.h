// Makes the servable form of one version of a repository model: given its
// config (config.json or Triton's config.pbtxt, which the repository read),
// finds the version's file, loads it as the file and the config say (model_format.h), learns its
// outputs from one run on zeros when the config leaves them out, and sets up
// its scheduling and, for a generative model, its generation engines; or
// makes a Triton Python-backend model's instances, or a TorchServe model's
// workers. Thread-safe.
#ifndef CHORUS_SERVER_MODELS_MODEL_LOADER_H_
#define CHORUS_SERVER_MODELS_MODEL_LOADER_H_

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "chorus/common/status.h"
#include "chorus/interpreter/placement.h"
#include "chorus/package/model.h"
#include "chorus/package/signature.h"
#include "chorus/server/config/model_config.h"
#include "chorus/server/config/torchserve_model_settings.h"
#include "chorus/server/models/loaded_model.h"
#include "chorus/server/models/repository_layout.h"

namespace chorus {

struct ModelLoaderOptions {
  size_t max_queue = 1024;  // per model, unless its config.json says
  int workers = 1;          // concurrent executions per model
  // How long a model whose config.json leaves out its outputs may take to
  // answer zeros (how chorus learns them) before its load fails.
  std::chrono::milliseconds probe_timeout{60000};
  // How long making a model in an interpreter may take (ModelOptions).
  std::chrono::milliseconds load_timeout{120000};
  // When set, only archives signed by one of these keys load.
  std::shared_ptr<const TrustedKeys> trusted_keys;
  // Whether a Python-backend model's auto_complete_config runs (Triton's
  // default; --disable-auto-complete-config turns it off).
  bool auto_complete_config = true;
  // A TorchServe model's settings before its model-config.yaml's: by model
  // name, what config.properties gives it (models=, model_snapshot), else the
  // server's defaults (min_workers 0: one worker per interpreter).
  TorchServeModelSettings torchserve_defaults;
  std::map<std::string, TorchServeModelSettings> torchserve_settings;
  // The envelope every TorchServe model's handler runs in ("": its archive's).
  std::string torchserve_service_envelope;
};

class ModelLoader {
 public:
  // Both outlive the loader. `find` gives the models an ensemble's steps name.
  ModelLoader(const RepositoryLayout* layout, InterpreterPlacement* placement,
              ModelLoaderOptions options, Ensemble::FindModel find)
      : layout_(layout),
        placement_(placement),
        options_(std::move(options)),
        find_(std::move(find)) {}

  // Version `version` (a version folder's name) of model `name`, served as
  // `config` (the model's config: the repository read it, or a load call gave
  // it) says, ready to serve; an ensemble needs no version folder. Errors say
  // what is wrong with the version's file or the config (a file that needs a
  // config.json gets the config to write); the model's own while loading.
  // Blocks for the load.
  StatusOr<std::shared_ptr<LoadedModel>> Load(const std::string& name, const std::string& version,
                                              ModelConfig config) const;

 private:
  // Ensemble `name` (version `version`) of `config`, planned over the step
  // models serving now.
  StatusOr<std::shared_ptr<LoadedModel>> LoadEnsemble(const std::string& name,
                                                      const std::string& version,
                                                      const ModelConfig& config) const;
  // Python-backend model `name` (version `version`): its config
  // auto-completed, its instances made, warmed up (model_loader_python.cc).
  StatusOr<std::shared_ptr<LoadedModel>> LoadPythonBackend(const std::string& name,
                                                           const std::string& version,
                                                           ModelConfig config) const;
  // Whether `name`'s version `version` is a Python-backend model: its
  // config says so, or names no backend and the folder holds model.py.
  bool IsPythonBackend(const ModelConfig& config, const std::string& name,
                       const std::string& version) const;
  // TorchServe model `name` (version `version`): the version folder holds a
  // .mar archive's files (MAR-INF/MANIFEST.json); its workers made
  // (model_loader_torchserve.cc).
  StatusOr<std::shared_ptr<LoadedModel>> LoadTorchServe(const std::string& name,
                                                        const std::string& version,
                                                        const ModelConfig& config) const;
  // Whether `name`'s version `version` is a TorchServe model: no config names
  // another kind, and the version folder holds MAR-INF/MANIFEST.json.
  bool IsTorchServe(const ModelConfig& config, const std::string& name,
                    const std::string& version) const;
  // The model at `path`, in the form `config` says.
  StatusOr<std::shared_ptr<Model>> LoadModel(const std::string& path, const ModelConfig& config,
                                             const std::string& name,
                                             const std::string& version) const;
  // The model, loaded again with the outputs one run on zeros gave.
  StatusOr<std::shared_ptr<Model>> LoadWithProbedOutputs(Model& probed, const std::string& path,
                                                         const ModelConfig& config,
                                                         ModelOptions options) const;

  const RepositoryLayout* const layout_;
  InterpreterPlacement* const placement_;
  const ModelLoaderOptions options_;
  const Ensemble::FindModel find_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_MODEL_LOADER_H_
