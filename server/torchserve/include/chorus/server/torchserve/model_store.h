// A TorchServe model store (--model-store) laid out as a chorus model
// repository: each entry registered (at start by --models, later by the
// management API) is opened (torchserve_archive.h) and linked in as
// <root>/<model name>/1, which the repository loads as a TorchServe model
// (model_loader.h). The models are named as TorchServe names them: the
// manifest's modelName, or the name a "name=entry" gives.
//
// Thread-safe. Owns the extracted archives and the links: they are removed
// with it, and the repository must not outlive it.
#ifndef CHORUS_SERVER_TORCHSERVE_MODEL_STORE_H_
#define CHORUS_SERVER_TORCHSERVE_MODEL_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chorus/common/file_util.h"
#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"

namespace chorus {

// One registered model.
struct TorchServeStoreEntry {
  std::string model_name;
  std::string model_version;  // the manifest's ("1.0" when it gives none)
  std::string url;            // the entry as registered ("x.mar", a path)
  bool loaded_at_startup = false;
};

class TorchServeModelStore {
 public:
  // The store `store` with the entries `models` names registered, in
  // TorchServe's forms (its --models and config.properties' load_models):
  // "all" (every .mar and every folder holding MAR-INF/MANIFEST.json),
  // "entry" (a .mar file or folder of the store, or a path), "name=entry".
  // Errors: NOT_FOUND for a store that is not a folder; Register's.
  static StatusOr<std::unique_ptr<TorchServeModelStore>> Open(
      const std::string& store, const std::vector<std::string>& models);

  // The model repository's root.
  const std::string& root() const { return repository_.path(); }

  // Opens `url` (an entry of the store, else a path) as model `name` ("": the
  // manifest's) and links it in; its entry. Errors, naming the url:
  // OpenTorchServeArchive's; INVALID_ARGUMENT for an entry without a manifest
  // (chorus cannot tell its handler yet) or an invalid model name;
  // ALREADY_EXISTS for a name registered already.
  StatusOr<TorchServeStoreEntry> Register(const std::string& url, const std::string& name,
                                          bool at_startup = false) CHORUS_EXCLUDES(mu_);
  // Unlinks model `name` and removes its extracted files; NOT_FOUND when it
  // is not registered.
  Status Unregister(const std::string& name) CHORUS_EXCLUDES(mu_);
  // The registered models, by name.
  std::vector<TorchServeStoreEntry> Entries() const CHORUS_EXCLUDES(mu_);
  StatusOr<TorchServeStoreEntry> Find(const std::string& name) const CHORUS_EXCLUDES(mu_);

 private:
  TorchServeModelStore(std::string store, ScopedTempDir repository)
      : store_(std::move(store)), repository_(std::move(repository)) {}
  struct Registered {
    TorchServeStoreEntry entry;
    std::string extracted;  // the .mar's files, removed with the entry ("" for a folder)
  };

  const std::string store_;
  const ScopedTempDir repository_;  // <name>/1 -> the archive's files; extracted .mar files
  mutable Mutex mu_;
  std::map<std::string, Registered> models_ CHORUS_GUARDED_BY(mu_);
};

}  // namespace chorus

#endif  // CHORUS_SERVER_TORCHSERVE_MODEL_STORE_H_
