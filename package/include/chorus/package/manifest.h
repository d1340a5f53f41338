// The chorus manifest of a package (docs/package-format.md).
#ifndef CHORUS_PACKAGE_MANIFEST_H_
#define CHORUS_PACKAGE_MANIFEST_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/common/status.h"

namespace chorus {

// One named tensor of a model's signature. -1 in `shape` is a dynamic size.
struct TensorSpec {
  std::string name;
  std::string dtype;  // "float32", "int64", ... (torch's names)
  std::vector<int64_t> shape;
  bool optional = false;  // an input a request may leave out (Triton's optional inputs)
};

struct EntryPoint {
  std::string kind;     // "pickle" or "factory"
  std::string package;  // pickle: torch.package package and resource
  std::string resource;
  std::string module;  // factory: module and callable inside the archive
  std::string factory;
};

struct Batching {
  bool batchable = false;
  int64_t batch_dim = 0;
  int64_t max_batch_size = 0;
};

struct FileDigest {
  std::string sha256;  // lowercase hex
  uint64_t size = 0;
};

struct Manifest {
  int format_version = 0;
  std::string model_name;
  std::string model_version;
  EntryPoint entry_point;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  Batching batching;
  std::string device;                       // "cpu" or "cuda"
  std::map<std::string, FileDigest> files;  // record name (relative) -> digest
  std::string json;                         // the manifest as written, for tools that want more
};

// Parses and validates a manifest. Errors (INVALID_ARGUMENT) start with
// "manifest invalid:" and name the offending field.
StatusOr<Manifest> ParseManifest(std::string_view json);

// Parses a signature alone, {"inputs": [...], "outputs": [...], "batching":
// {...}} with the manifest's fields (batching optional: not batchable), as
// formats without a manifest carry it. Errors as ParseManifest's; the other
// fields of the result are empty (device "cpu").
StatusOr<Manifest> ParseSignature(std::string_view json);

}  // namespace chorus

#endif  // CHORUS_PACKAGE_MANIFEST_H_
