// The formats a model file can be in, and the one table that says what each
// is called (config.json's "format", Triton's platform, messages) and how it
// runs. Model::Load (chorus/package/model.h) is the one place that maps a
// format to its loader.
#ifndef CHORUS_PACKAGE_MODEL_FORMAT_H_
#define CHORUS_PACKAGE_MODEL_FORMAT_H_

#include <optional>
#include <string>
#include <string_view>

namespace chorus {

enum class ModelFormat {
  kChorus,        // a chorus package: torch.package with a chorus manifest
  kTorchPackage,  // a stock torch.package archive (PackageExporter), no manifest
  kTorchScript,   // torch.jit.save
  kTorchExport,   // torch.export.save (an ExportedProgram, .pt2)
  kAotInductor,   // torch._inductor.aoti_compile_and_package (.pt2)
};

struct ModelFormatInfo {
  ModelFormat format;
  const char* config_name;  // config.json's "format" ("chorus", "torch_package", ...)
  const char* platform;     // ModelMetadata's platform (Triton's name for TorchScript)
  const char* description;  // what messages call such a file ("TorchScript file")
  // Runs in the interpreters (Python); else on libtorch alone.
  bool runs_on_interpreters;
};

const ModelFormatInfo& FormatInfo(ModelFormat format);
// The format config.json calls `name`; nullopt for an unknown name.
std::optional<ModelFormat> FormatByConfigName(std::string_view name);
// Every config name, for errors: "chorus, torch_package, ...".
std::string FormatConfigNames();

}  // namespace chorus

#endif  // CHORUS_PACKAGE_MODEL_FORMAT_H_
