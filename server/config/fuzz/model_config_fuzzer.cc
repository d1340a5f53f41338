// libFuzzer target: arbitrary bytes as a model's config.json. Parsing must
// return an error or a config, never crash, hang or leak; a config with a
// signature gives a manifest whose tensors have known dtypes.
#include <cstdint>
#include <string_view>

#include "chorus/package/dtype.h"
#include "chorus/server/config/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  chorus::StatusOr<chorus::ModelConfig> config = chorus::ParseModelConfig(json);
  if (!config.ok() || !config->has_signature()) return 0;
  chorus::StatusOr<chorus::Manifest> manifest = chorus::SignatureManifest(*config, "model", "1");
  if (!manifest.ok()) return 0;
  for (const auto& tensors : {manifest->inputs, manifest->outputs}) {
    for (const chorus::TensorSpec& spec : tensors) {
      if (chorus::DtypeByName(spec.dtype) == nullptr) __builtin_trap();
    }
  }
  return 0;
}
