// The model repository on disk, Triton's layout:
//   <root>/<model>/config.json             how to serve it (model_config.h)
//   <root>/<model>/<version>/<file>.pt     versions are integers (the version
//                                          policy says which serve; by default the highest)
// read (models, versions, the file of a version) and written (Publish: a new
// version appears whole or not at all). Holds no state but the root;
// thread-safe.
#ifndef CHORUS_SERVER_MODELS_REPOSITORY_LAYOUT_H_
#define CHORUS_SERVER_MODELS_REPOSITORY_LAYOUT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "chorus/common/file_util.h"
#include "chorus/common/status.h"

namespace chorus {

// OK if `name` can name a model (a folder of the repository root): not empty,
// no '/', not starting with '.'. INVALID_ARGUMENT naming it otherwise.
Status CheckModelName(const std::string& name);

// A private folder (in TMPDIR, hidden, mode 0700) holding a folder of model
// `name` with only `files` (path within that folder -> contents), laid out
// as a repository root of its own: <path()>/<name>/<path>. Removed with the
// result. INVALID_ARGUMENT for a path that is not a file within the folder
// (absolute, empty, or with a "." or ".." part).
StatusOr<ScopedTempDir> WritePrivateModelFolder(const std::string& name,
                                                const std::map<std::string, std::string>& files);

// A version Publish wrote.
struct PublishedVersion {
  int64_t version = 0;
  std::string path;  // its model file, where it now is
};

class RepositoryLayout {
 public:
  explicit RepositoryLayout(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  std::string ModelDir(const std::string& name) const { return root_ + "/" + name; }

  // NOT_FOUND when the root is not a directory.
  Status CheckRoot() const;
  // The models: the root's folders but hidden ones, sorted by name.
  std::vector<std::string> ModelNames() const;
  bool HasModel(const std::string& name) const;
  // The highest version folder of `name` (a non-negative int64 name);
  // NOT_FOUND when it has none.
  StatusOr<std::string> LatestVersion(const std::string& name) const;
  // Every version folder of `name`: its number -> its folder's name.
  std::map<int64_t, std::string> Versions(const std::string& name) const;
  // The model file of `version`: `file_name` when given (NOT_FOUND if
  // missing), else the first *.pt or *.pt2 file there by name.
  StatusOr<std::string> ModelFile(const std::string& name, const std::string& version,
                                  const std::string& file_name) const;

  // Writes version `version` of `name` (0: the one after the highest) with
  // `write`, which gets the path of the model file to write (model.pt, in a
  // hidden folder) and the version, then moves that folder into place in one
  // rename (one exchange when the version exists: readers see the old or the
  // new, never a part). Errors: `write`'s, and the file system's.
  using VersionWriter = std::function<Status(const std::string& path, int64_t version)>;
  StatusOr<PublishedVersion> Publish(const std::string& name, int64_t version,
                                     const VersionWriter& write) const;

 private:
  const std::string root_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_REPOSITORY_LAYOUT_H_
