#include "chorus/package/model_format.h"

#include <iterator>

#include "chorus/package/format.h"

namespace chorus {
namespace {

namespace fmt = package_format;

// In enum order (checked below).
constexpr ModelFormatInfo kFormats[] = {
    {ModelFormat::kChorus, "chorus", "pytorch_torch_package", fmt::kKindTorchPackage, true},
    {ModelFormat::kTorchPackage, "torch_package", "pytorch_torch_package", fmt::kKindTorchPackage,
     true},
    {ModelFormat::kTorchScript, "torchscript", "pytorch_libtorch", fmt::kKindTorchScript, false},
    {ModelFormat::kTorchExport, "torch_export", "pytorch_torch_export", fmt::kKindTorchExport,
     true},
    {ModelFormat::kAotInductor, "aot_inductor", "pytorch_aot_inductor", fmt::kKindAotInductor,
     false},
};

constexpr bool InEnumOrder() {
  for (size_t i = 0; i < std::size(kFormats); ++i) {
    if (static_cast<size_t>(kFormats[i].format) != i) return false;
  }
  return true;
}
static_assert(InEnumOrder(), "kFormats must list every ModelFormat in enum order");

}  // namespace

const ModelFormatInfo& FormatInfo(ModelFormat format) {
  return kFormats[static_cast<size_t>(format)];
}

std::optional<ModelFormat> FormatByConfigName(std::string_view name) {
  for (const ModelFormatInfo& info : kFormats) {
    if (name == info.config_name) return info.format;
  }
  return std::nullopt;
}

std::string FormatConfigNames() {
  std::string names;
  for (const ModelFormatInfo& info : kFormats) {
    names += (names.empty() ? "" : ", ") + std::string(info.config_name);
  }
  return names;
}

}  // namespace chorus
