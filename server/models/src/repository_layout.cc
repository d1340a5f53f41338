#include "chorus/server/models/repository_layout.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <optional>
#include <string_view>

#include "chorus/common/file_util.h"
#include "chorus/common/numbers.h"

namespace chorus {
namespace {

constexpr char kPublishedFile[] = "model.pt";

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The names in `dir` (hidden ones aside) of folders, or of other entries.
std::vector<std::string> Entries(const std::string& dir, bool directories) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* entry = readdir(d)) {
    std::string name = entry->d_name;
    if (name.empty() || name[0] == '.') continue;
    struct stat st;
    if (::stat((dir + "/" + name).c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode) == directories) names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// The highest version folder in `model_dir` and its number (-1: none).
// Folders that are not an int64 (too long, not digits) are not versions.
std::pair<std::string, int64_t> HighestVersion(const std::string& model_dir) {
  std::pair<std::string, int64_t> highest{"", -1};
  for (const std::string& entry : Entries(model_dir, /*directories=*/true)) {
    std::optional<int64_t> number = ParseNonNegativeInt64(entry);
    if (number && *number > highest.second) highest = {entry, *number};
  }
  return highest;
}

}  // namespace

Status CheckModelName(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') {
    return InvalidArgumentError("bad model name \"" + name + "\"");
  }
  return OkStatus();
}

StatusOr<ScopedTempDir> WritePrivateModelFolder(const std::string& name,
                                                const std::map<std::string, std::string>& files) {
  CHORUS_RETURN_IF_ERROR(CheckModelName(name));
  for (const auto& [path, contents] : files) {
    bool within = !path.empty() && path[0] != '/' && path.find('\0') == std::string::npos;
    for (size_t start = 0; within && start <= path.size();) {
      const size_t end = std::min(path.find('/', start), path.size());
      const std::string_view part(path.data() + start, end - start);
      within = !part.empty() && part != "." && part != "..";
      start = end + 1;
    }
    if (!within) {
      return InvalidArgumentError("load parameter 'file:" + path +
                                  "': the path must name a file within the model's folder");
    }
  }
  CHORUS_ASSIGN_OR_RETURN(ScopedTempDir dir, ScopedTempDir::Create(".chorus-load-" + name + "-"));
  for (const auto& [path, contents] : files) {
    const std::string target = dir.path() + "/" + name + "/" + path;
    CHORUS_RETURN_IF_ERROR(MakeDirectories(target.substr(0, target.rfind('/'))));
    CHORUS_RETURN_IF_ERROR(WriteFileAtomically(target, contents));
  }
  return dir;
}

Status RepositoryLayout::CheckRoot() const {
  if (IsDirectory(root_)) return OkStatus();
  return NotFoundError("model repository " + root_ + " is not a directory");
}

std::vector<std::string> RepositoryLayout::ModelNames() const {
  return Entries(root_, /*directories=*/true);
}

bool RepositoryLayout::HasModel(const std::string& name) const {
  return IsDirectory(ModelDir(name));
}

std::map<int64_t, std::string> RepositoryLayout::Versions(const std::string& name) const {
  std::map<int64_t, std::string> versions;
  for (const std::string& entry : Entries(ModelDir(name), /*directories=*/true)) {
    if (std::optional<int64_t> number = ParseNonNegativeInt64(entry)) {
      versions.emplace(*number, entry);
    }
  }
  return versions;
}

StatusOr<std::string> RepositoryLayout::LatestVersion(const std::string& name) const {
  std::string version = HighestVersion(ModelDir(name)).first;
  if (version.empty()) return NotFoundError("model " + name + " has no numbered version folder");
  return version;
}

StatusOr<std::string> RepositoryLayout::ModelFile(const std::string& name,
                                                  const std::string& version,
                                                  const std::string& file_name) const {
  const std::string version_dir = ModelDir(name) + "/" + version;
  if (!file_name.empty()) {
    const std::string path = version_dir + "/" + file_name;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return NotFoundError(path + " (config.json's default_model_filename) does not exist");
    }
    return path;
  }
  for (const std::string& file : Entries(version_dir, /*directories=*/false)) {
    const std::string extension = file.substr(std::min(file.size(), file.rfind('.')));
    if (extension == ".pt" || extension == ".pt2") return version_dir + "/" + file;
  }
  return NotFoundError(version_dir + " has no .pt or .pt2 file (or set default_model_filename)");
}

StatusOr<PublishedVersion> RepositoryLayout::Publish(const std::string& name, int64_t version,
                                                     const VersionWriter& write) const {
  CHORUS_RETURN_IF_ERROR(CheckModelName(name));
  const std::string model_dir = ModelDir(name);
  if (version <= 0) version = HighestVersion(model_dir).second + 1;
  if (version <= 0) version = 1;
  const std::string final_dir = model_dir + "/" + std::to_string(version);
  // Hidden (a leading '.'): no reader takes it for a version while it is written.
  const std::string staging =
      TemporarySiblingPath(model_dir + "/.publish-" + std::to_string(version));
  CHORUS_RETURN_IF_ERROR(MakeDirectories(staging));
  Status written = write(staging + "/" + kPublishedFile, version);
  if (written.ok()) written = SyncTree(staging);
  if (written.ok()) {
    written =
        IsDirectory(final_dir) ? ExchangePaths(staging, final_dir) : RenameFile(staging, final_dir);
  }
  // After an exchange the staging name holds the version replaced.
  Status removed = RemoveTree(staging);
  CHORUS_RETURN_IF_ERROR(written);
  CHORUS_RETURN_IF_ERROR(removed);
  CHORUS_RETURN_IF_ERROR(SyncPath(model_dir));
  return PublishedVersion{version, final_dir + "/" + kPublishedFile};
}

}  // namespace chorus
