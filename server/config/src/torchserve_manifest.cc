#include "chorus/server/config/torchserve_manifest.h"

#include <nlohmann/json.hpp>

#include <utility>

namespace chorus {
namespace {

using Json = nlohmann::json;

Status ManifestError(const std::string& what) {
  return InvalidArgumentError("MANIFEST.json: " + what);
}

// object[key] into *out when present; an error naming `path` when it is not
// a string (TorchServe's Gson would take a number for a string field, but
// torch-model-archiver never writes one: it is a sign of a hand-made file).
Status ReadString(const Json& object, const char* key, const std::string& path, std::string* out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return OkStatus();
  if (!it->is_string()) return ManifestError(path + ": must be a string");
  *out = it->get<std::string>();
  return OkStatus();
}

bool IsAsciiAlnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

Status ReadModel(const Json& model, TorchServeManifest* manifest) {
  const std::pair<const char*, std::string*> fields[] = {
      {"modelName", &manifest->model_name},    {"modelVersion", &manifest->model_version},
      {"handler", &manifest->handler_text},    {"serializedFile", &manifest->serialized_file},
      {"modelFile", &manifest->model_file},    {"requirementsFile", &manifest->requirements_file},
      {"configFile", &manifest->config_file},  {"envelope", &manifest->envelope},
      {"description", &manifest->description},
  };
  for (const auto& [key, out] : fields) {
    CHORUS_RETURN_IF_ERROR(ReadString(model, key, std::string("model.") + key, out));
  }
  if (!manifest->model_name.empty() && !IsTorchServeModelName(manifest->model_name)) {
    return ManifestError("model.modelName: '" + manifest->model_name +
                         "' is not a model name (letters, digits, '_', '-' and '.', starting "
                         "with a letter or digit)");
  }
  if (manifest->model_version.empty()) {
    return ManifestError("model.modelVersion: must not be empty");
  }
  if (manifest->handler_text.empty()) return OkStatus();  // the server's default handler
  StatusOr<TorchServeHandler> handler = ParseTorchServeHandler(manifest->handler_text);
  if (!handler.ok()) return ManifestError("model.handler: " + handler.status().message());
  manifest->handler = *std::move(handler);
  return OkStatus();
}

}  // namespace

bool IsTorchServeModelName(std::string_view name) {
  if (name.empty() || !IsAsciiAlnum(name.front())) return false;
  for (char c : name) {
    if (!IsAsciiAlnum(c) && c != '_' && c != '-' && c != '.') return false;
  }
  return true;
}

StatusOr<TorchServeHandler> ParseTorchServeHandler(std::string_view text) {
  TorchServeHandler handler;
  std::string_view module = text;
  if (size_t colon = text.find(':'); colon != std::string_view::npos) {
    module = text.substr(0, colon);
    handler.function = std::string(text.substr(colon + 1));
    if (handler.function.empty()) {
      return InvalidArgumentError("'" + std::string(text) + "' names no function after ':'");
    }
  }
  if (module.size() >= 3 && module.substr(module.size() - 3) == ".py") {
    module.remove_suffix(3);
  }
  if (size_t slash = module.rfind('/'); slash != std::string_view::npos) {
    module = module.substr(slash + 1);  // the archiver copied the file to the root
  }
  if (module.empty()) return InvalidArgumentError("'" + std::string(text) + "' names no module");
  handler.module = std::string(module);
  return handler;
}

StatusOr<TorchServeManifest> ParseTorchServeManifest(std::string_view text) {
  Json root = Json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return ManifestError("not JSON");
  if (!root.is_object()) return ManifestError("not a JSON object");
  TorchServeManifest manifest;
  CHORUS_RETURN_IF_ERROR(ReadString(root, "runtime", "runtime", &manifest.runtime));
  if (manifest.runtime != "python" && manifest.runtime != "python3") {
    return ManifestError("runtime: '" + manifest.runtime +
                         "' is not served by chorus (it runs Python handlers: python, python3)");
  }
  auto model = root.find("model");
  if (model == root.end() || !model->is_object()) {
    return ManifestError(
        "model: missing, or not an object (TorchServe: \"Missing Model entry "
        "in manifest file.\")");
  }
  CHORUS_RETURN_IF_ERROR(ReadModel(*model, &manifest));
  return manifest;
}

}  // namespace chorus
