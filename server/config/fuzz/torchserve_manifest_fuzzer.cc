// libFuzzer target: arbitrary bytes as a TorchServe archive's MANIFEST.json.
// Parsing must return an error or a manifest, never crash, hang or leak; a
// manifest it takes has a handler that names a module, or none, and a name
// TorchServe would take, or none.
#include <cstdint>
#include <string_view>

#include "chorus/server/config/torchserve_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  chorus::StatusOr<chorus::TorchServeManifest> manifest = chorus::ParseTorchServeManifest(text);
  if (!manifest.ok()) return 0;
  if (manifest->handler_text.empty() != manifest->handler.module.empty()) __builtin_trap();
  if (!manifest->model_name.empty() && !chorus::IsTorchServeModelName(manifest->model_name)) {
    __builtin_trap();
  }
  return 0;
}
