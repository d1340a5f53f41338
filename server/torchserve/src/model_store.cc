#include "chorus/server/torchserve/model_store.h"

#include <algorithm>
#include <filesystem>

#include "chorus/server/config/torchserve_archive.h"

namespace chorus {
namespace fs = std::filesystem;
namespace {

// Where .mar archives are extracted: hidden, so the repository lists no model there.
constexpr char kArchives[] = ".archives";

// The entries "all" names: .mar files and folders with a manifest, by name.
std::vector<std::string> AllEntries(const std::string& store) {
  std::vector<std::string> entries;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(store, error)) {
    const fs::path& path = entry.path();
    const bool archive = entry.is_regular_file(error) && path.extension() == ".mar";
    const bool folder =
        entry.is_directory(error) && fs::is_regular_file(path / "MAR-INF" / "MANIFEST.json", error);
    if (archive || folder) entries.push_back(path.filename().string());
  }
  std::sort(entries.begin(), entries.end());
  return entries;
}

// Removes a folder when it goes out of scope, unless released.
class ScopedRemoval {
 public:
  explicit ScopedRemoval(std::string path) : path_(std::move(path)) {}
  ~ScopedRemoval() {
    if (!path_.empty()) RemoveTree(path_).IgnoreError();
  }
  ScopedRemoval(const ScopedRemoval&) = delete;
  ScopedRemoval& operator=(const ScopedRemoval&) = delete;
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

}  // namespace

StatusOr<std::unique_ptr<TorchServeModelStore>> TorchServeModelStore::Open(
    const std::string& store, const std::vector<std::string>& models) {
  std::error_code error;
  if (!fs::is_directory(store, error)) {
    return NotFoundError("model store " + store + " is not a folder");
  }
  CHORUS_ASSIGN_OR_RETURN(ScopedTempDir repository, ScopedTempDir::Create("chorus-model-store-"));
  fs::create_directory(fs::path(repository.path()) / kArchives, error);
  if (error) return InternalError("model store: " + error.message());
  std::unique_ptr<TorchServeModelStore> opened(
      new TorchServeModelStore(store, std::move(repository)));
  for (const std::string& model : models) {
    if (model == "all") {
      for (const std::string& entry : AllEntries(store)) {
        CHORUS_RETURN_IF_ERROR(opened->Register(entry, "", true).status());
      }
      continue;
    }
    const size_t equals = model.find('=');
    const std::string url = equals == std::string::npos ? model : model.substr(equals + 1);
    const std::string name = equals == std::string::npos ? "" : model.substr(0, equals);
    CHORUS_RETURN_IF_ERROR(opened->Register(url, name, true).status());
  }
  return opened;
}

StatusOr<TorchServeStoreEntry> TorchServeModelStore::Register(const std::string& url,
                                                              const std::string& name,
                                                              bool at_startup) {
  std::error_code error;
  // As TorchServe: a name the store holds, else a path.
  const fs::path in_store = fs::path(store_) / url;
  const std::string path = fs::exists(in_store, error) ? in_store.string() : url;
  CHORUS_ASSIGN_OR_RETURN(TorchServeArchive archive,
                          OpenTorchServeArchive(path, root() + "/" + kArchives));
  Registered registered{{archive.model_name, "", url, at_startup},
                        archive.extracted ? archive.model_dir : ""};
  ScopedRemoval discard(registered.extracted);  // unless registered below
  if (!archive.manifest) {
    return InvalidArgumentError("model store entry " + url +
                                " has no MAR-INF/MANIFEST.json: chorus serves archives that "
                                "torch-model-archiver made");
  }
  TorchServeStoreEntry& entry = registered.entry;
  entry.model_version = archive.manifest->model_version;
  if (!name.empty()) entry.model_name = name;
  if (!IsTorchServeModelName(entry.model_name)) {
    return InvalidArgumentError("model store entry " + url + ": invalid model name '" +
                                entry.model_name + "'");
  }
  MutexLock lock(&mu_);
  if (models_.count(entry.model_name) > 0) {
    return AlreadyExistsError("Model version " + entry.model_version +
                              " is already registered for model " + entry.model_name);
  }
  const fs::path folder = fs::path(root()) / entry.model_name;
  fs::create_directory(folder, error);
  if (!error) fs::create_directory_symlink(archive.model_dir, folder / "1", error);
  if (error) {
    RemoveTree(folder.string()).IgnoreError();
    return InternalError("model store entry " + url + ": cannot link " + folder.string() + ": " +
                         error.message());
  }
  discard.Release();
  models_[entry.model_name] = registered;
  return entry;
}

Status TorchServeModelStore::Unregister(const std::string& name) {
  // Under the lock: a registration of the same name may follow at once.
  MutexLock lock(&mu_);
  auto found = models_.find(name);
  if (found == models_.end()) return NotFoundError("Model not found: " + name);
  const std::string extracted = found->second.extracted;
  models_.erase(found);
  CHORUS_RETURN_IF_ERROR(RemoveTree(root() + "/" + name));
  return extracted.empty() ? OkStatus() : RemoveTree(extracted);
}

std::vector<TorchServeStoreEntry> TorchServeModelStore::Entries() const {
  MutexLock lock(&mu_);
  std::vector<TorchServeStoreEntry> entries;
  for (const auto& [name, registered] : models_) entries.push_back(registered.entry);
  return entries;
}

StatusOr<TorchServeStoreEntry> TorchServeModelStore::Find(const std::string& name) const {
  MutexLock lock(&mu_);
  auto found = models_.find(name);
  if (found == models_.end()) return NotFoundError("Model not found: " + name);
  return found->second.entry;
}

}  // namespace chorus
