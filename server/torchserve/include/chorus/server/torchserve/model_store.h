// A TorchServe model store (--model-store with --models) laid out as a chorus
// model repository: each entry TorchServe would register (a .mar archive, or a
// folder of an archive's files) opened (torchserve_archive.h) and linked in
// as <root>/<model name>/1, which the repository loads as a TorchServe model
// (model_loader.h). The models are named as TorchServe names them: the
// manifest's modelName, or the name a "name=entry" gives.
//
// Thread-compatible. Owns the extracted archives and the links: they are
// removed with it, and the repository must not outlive it.
#ifndef CHORUS_SERVER_TORCHSERVE_MODEL_STORE_H_
#define CHORUS_SERVER_TORCHSERVE_MODEL_STORE_H_

#include <string>
#include <vector>

#include "chorus/common/file_util.h"
#include "chorus/common/status.h"

namespace chorus {

class TorchServeModelStore {
 public:
  // Opens the entries of `store` that `models` names, in TorchServe's forms
  // (its --models and config.properties' load_models): "all" (every .mar
  // and every folder holding MAR-INF/MANIFEST.json), "entry" (a .mar file or
  // folder of the store, or a path), "name=entry". Errors, naming the entry:
  // OpenTorchServeArchive's; INVALID_ARGUMENT for an entry without a manifest
  // (chorus cannot tell its handler yet) or two entries giving one name;
  // NOT_FOUND for a store that is not a folder.
  static StatusOr<TorchServeModelStore> Open(const std::string& store,
                                             const std::vector<std::string>& models);

  TorchServeModelStore(TorchServeModelStore&&) = default;
  TorchServeModelStore& operator=(TorchServeModelStore&&) = default;

  // The model repository's root.
  const std::string& root() const { return repository_.path(); }
  // The models it holds, by name.
  const std::vector<std::string>& model_names() const { return names_; }

 private:
  TorchServeModelStore() = default;
  // Opens `entry` as model `name` ("": the manifest's).
  Status Add(const std::string& entry, const std::string& name);

  ScopedTempDir extracted_;   // the .mar archives' files
  ScopedTempDir repository_;  // <name>/1 -> the archive's files
  std::vector<std::string> names_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_TORCHSERVE_MODEL_STORE_H_
