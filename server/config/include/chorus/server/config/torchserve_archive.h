// A TorchServe model store entry opened as TorchServe 0.12 opens it: a .mar
// archive (zip, deflated or stored) extracted into a folder of its own, or a
// folder holding the archive's files (torch-model-archiver's no-archive
// format) used where it is. Its MAR-INF/MANIFEST.json is read
// (torchserve_manifest.h); an entry without one is a model named after the
// entry, its handler the server's default.
//
// Thread-compatible; reads the entry and writes only under `extract_root`.
#ifndef CHORUS_SERVER_CONFIG_TORCHSERVE_ARCHIVE_H_
#define CHORUS_SERVER_CONFIG_TORCHSERVE_ARCHIVE_H_

#include <optional>
#include <string>

#include "chorus/common/status.h"
#include "chorus/server/config/torchserve_manifest.h"

namespace chorus {

struct TorchServeArchive {
  std::string model_name;  // the manifest's, else the entry's name without .mar
  std::string model_dir;   // the archive's files (an absolute path): the handler's model_dir
  bool extracted = false;  // model_dir was made from a .mar (the caller removes it)
  std::optional<TorchServeManifest> manifest;  // nullopt: the entry has none
};

// Opens the model store entry `path`. A .mar is extracted into a new folder
// under `extract_root` (which must exist); a folder that holds exactly one
// folder and nothing else is that folder (TorchServe's unwrapping of
// SageMaker's layout). Errors name `path`: NOT_FOUND for no such entry,
// INVALID_ARGUMENT for a file that is not a zip archive, a .tar.gz (not read:
// its extracted folder is), a zip that ZipFile refuses, or a manifest
// ParseTorchServeManifest refuses.
StatusOr<TorchServeArchive> OpenTorchServeArchive(const std::string& path,
                                                  const std::string& extract_root);

}  // namespace chorus

#endif  // CHORUS_SERVER_CONFIG_TORCHSERVE_ARCHIVE_H_
