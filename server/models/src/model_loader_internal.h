// What the model loader's two files share (model_loader.cc: models from
// files and ensembles; model_loader_python.cc: Triton Python-backend models).
#ifndef CHORUS_SERVER_MODELS_SRC_MODEL_LOADER_INTERNAL_H_
#define CHORUS_SERVER_MODELS_SRC_MODEL_LOADER_INTERNAL_H_

#include <string>

#include "chorus/server/models/loaded_model.h"
#include "chorus/server/models/model_loader.h"

namespace chorus::model_loader {

// Scheduling for a model: its manifest's batching hints, then its config.
SchedulerOptions SchedulingFor(const ModelConfig& config, const Manifest& manifest,
                               const ModelLoaderOptions& options);

// The config's "tensors", checked against the manifest: formats on inputs,
// labels (read from the model's folder) on outputs, reshapes on either.
StatusOr<TensorAnnotations> ResolveAnnotations(const ModelConfig& config, const Manifest& manifest,
                                               const std::string& model_dir);

}  // namespace chorus::model_loader

#endif  // CHORUS_SERVER_MODELS_SRC_MODEL_LOADER_INTERNAL_H_
