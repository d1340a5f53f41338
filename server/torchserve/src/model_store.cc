#include "chorus/server/torchserve/model_store.h"

#include <algorithm>
#include <filesystem>

#include "chorus/server/config/torchserve_archive.h"

namespace chorus {
namespace fs = std::filesystem;
namespace {

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

}  // namespace

StatusOr<TorchServeModelStore> TorchServeModelStore::Open(const std::string& store,
                                                          const std::vector<std::string>& models) {
  std::error_code error;
  if (!fs::is_directory(store, error)) {
    return NotFoundError("model store " + store + " is not a folder");
  }
  TorchServeModelStore opened;
  CHORUS_ASSIGN_OR_RETURN(opened.extracted_, ScopedTempDir::Create("chorus-mar-"));
  CHORUS_ASSIGN_OR_RETURN(opened.repository_, ScopedTempDir::Create("chorus-model-store-"));
  for (const std::string& model : models) {
    if (model == "all") {
      for (const std::string& entry : AllEntries(store)) {
        CHORUS_RETURN_IF_ERROR(opened.Add((fs::path(store) / entry).string(), ""));
      }
      continue;
    }
    const size_t equals = model.find('=');
    const std::string entry = equals == std::string::npos ? model : model.substr(equals + 1);
    const std::string name = equals == std::string::npos ? "" : model.substr(0, equals);
    // As TorchServe: a name the store holds, else a path.
    const std::string path =
        fs::exists(fs::path(store) / entry, error) ? (fs::path(store) / entry).string() : entry;
    CHORUS_RETURN_IF_ERROR(opened.Add(path, name));
  }
  return opened;
}

Status TorchServeModelStore::Add(const std::string& entry, const std::string& name) {
  CHORUS_ASSIGN_OR_RETURN(TorchServeArchive archive,
                          OpenTorchServeArchive(entry, extracted_.path()));
  if (!archive.manifest) {
    return InvalidArgumentError("model store entry " + entry +
                                " has no MAR-INF/MANIFEST.json: chorus serves archives that "
                                "torch-model-archiver made");
  }
  const std::string model_name = name.empty() ? archive.model_name : name;
  if (!IsTorchServeModelName(model_name)) {
    return InvalidArgumentError("model store entry " + entry + ": invalid model name '" +
                                model_name + "'");
  }
  if (std::find(names_.begin(), names_.end(), model_name) != names_.end()) {
    return InvalidArgumentError("model store entry " + entry + ": a model named " + model_name +
                                " is registered already");
  }
  const fs::path folder = fs::path(repository_.path()) / model_name;
  std::error_code error;
  fs::create_directory(folder, error);
  if (!error) fs::create_directory_symlink(archive.model_dir, folder / "1", error);
  if (error) {
    return InternalError("model store entry " + entry + ": cannot link " + folder.string() + ": " +
                         error.message());
  }
  names_.push_back(model_name);
  return OkStatus();
}

}  // namespace chorus
