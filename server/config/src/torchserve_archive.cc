#include "chorus/server/config/torchserve_archive.h"

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "chorus/package/zip_file.h"

namespace chorus {
namespace {

namespace fs = std::filesystem;

constexpr char kManifest[] = "MAR-INF/MANIFEST.json";

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The folder itself, or the one folder it holds when it holds nothing else.
fs::path Unwrapped(const fs::path& folder) {
  std::vector<fs::path> children;
  std::error_code error;
  for (const auto& child : fs::directory_iterator(folder, error)) {
    children.push_back(child.path());
    if (children.size() > 1) return folder;
  }
  if (children.size() == 1 && fs::is_directory(children[0]) && !fs::exists(folder / kManifest)) {
    return children[0];
  }
  return folder;
}

// A new, empty folder under `root` named after `stem`.
StatusOr<std::string> NewFolder(const std::string& root, const std::string& stem) {
  std::string pattern = (fs::path(root) / (stem + ".XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) return ErrnoError("mkdtemp " + pattern, errno);
  return pattern;
}

// The manifest of the archive in `model_dir`, nullopt where it has none.
StatusOr<std::optional<TorchServeManifest>> ReadManifest(const fs::path& model_dir,
                                                         const std::string& shown) {
  const fs::path path = model_dir / kManifest;
  if (!fs::is_regular_file(path)) return std::optional<TorchServeManifest>();
  std::ifstream in(path, std::ios::binary);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  StatusOr<TorchServeManifest> manifest = ParseTorchServeManifest(text);
  if (!manifest.ok()) return manifest.status().Annotate(shown);
  return std::optional<TorchServeManifest>(*std::move(manifest));
}

StatusOr<TorchServeArchive> Described(TorchServeArchive archive, const std::string& path,
                                      const std::string& stem) {
  CHORUS_ASSIGN_OR_RETURN(archive.manifest, ReadManifest(archive.model_dir, path));
  archive.model_name = archive.manifest && !archive.manifest->model_name.empty()
                           ? archive.manifest->model_name
                           : stem;
  if (!IsTorchServeModelName(archive.model_name)) {
    return InvalidArgumentError(path + ": '" + archive.model_name + "' is not a model name");
  }
  return archive;
}

StatusOr<TorchServeArchive> OpenMar(const std::string& path, const std::string& extract_root,
                                    const std::string& stem) {
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<const ZipFile> zip, ZipFile::Open(path));
  CHORUS_ASSIGN_OR_RETURN(std::string folder, NewFolder(fs::absolute(extract_root).string(), stem));
  CHORUS_RETURN_IF_ERROR(zip->ExtractTo(folder));
  TorchServeArchive archive;
  archive.model_dir = folder;
  archive.extracted = true;
  StatusOr<TorchServeArchive> described = Described(std::move(archive), path, stem);
  std::error_code error;
  if (!described.ok()) fs::remove_all(folder, error);
  return described;
}

}  // namespace

StatusOr<TorchServeArchive> OpenTorchServeArchive(const std::string& path,
                                                  const std::string& extract_root) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) return NotFoundError(path + ": no such model archive or folder");
  fs::path entry = fs::path(path).lexically_normal();
  if (!entry.has_filename()) entry = entry.parent_path();  // "models/noop/"
  const std::string name = entry.filename().string();
  if (fs::is_directory(status)) {
    TorchServeArchive archive;
    archive.model_dir = fs::absolute(Unwrapped(entry)).string();
    return Described(std::move(archive), path, name);
  }
  if (EndsWith(name, ".tar.gz") || EndsWith(name, ".tgz")) {
    return InvalidArgumentError(path +
                                ": chorus does not read .tar.gz model archives; extract "
                                "it and give the folder instead");
  }
  const std::string stem = EndsWith(name, ".mar") ? name.substr(0, name.size() - 4) : name;
  return OpenMar(path, extract_root, stem);
}

}  // namespace chorus
