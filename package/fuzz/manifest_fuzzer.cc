// libFuzzer target: arbitrary bytes as a manifest (and as a signature alone).
// Parsing must return an error or a manifest, never crash, hang or leak; a
// manifest parsed once must parse again, from the text it keeps, to the same.
#include <cstdint>
#include <string_view>

#include "chorus/package/manifest.h"

namespace {

void CheckReparses(const chorus::Manifest& manifest) {
  chorus::StatusOr<chorus::Manifest> again = chorus::ParseManifest(manifest.json);
  if (!again.ok() || again->model_name != manifest.model_name ||
      again->inputs.size() != manifest.inputs.size() ||
      again->outputs.size() != manifest.outputs.size() ||
      again->files.size() != manifest.files.size()) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  chorus::StatusOr<chorus::Manifest> manifest = chorus::ParseManifest(text);
  if (manifest.ok()) CheckReparses(*manifest);
  (void)chorus::ParseSignature(text);
  return 0;
}
