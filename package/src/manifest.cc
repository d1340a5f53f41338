#include "chorus/package/manifest.h"

#include <nlohmann/json.hpp>

#include <regex>
#include <set>

#include "chorus/package/dtype.h"
#include "chorus/package/format.h"

namespace chorus {
namespace {

using Json = nlohmann::json;

Status Invalid(const std::string& what) {
  return InvalidArgumentError("manifest invalid: " + what);
}

// Reads `object[key]` as a non-empty string.
StatusOr<std::string> String(const Json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string() || it->get<std::string>().empty()) {
    return Invalid(where + "." + key + " must be a non-empty string");
  }
  return it->get<std::string>();
}

StatusOr<int64_t> NonNegative(const Json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer() || it->get<int64_t>() < 0) {
    return Invalid(where + "." + key + " must be an integer >= 0");
  }
  return it->get<int64_t>();
}

StatusOr<std::vector<TensorSpec>> Specs(const Json& manifest, const char* key) {
  auto it = manifest.find(key);
  if (it == manifest.end() || !it->is_array() || it->empty()) {
    return Invalid(std::string(key) + " must be a non-empty list");
  }
  // TensorFlow-style names ("input:0", "serving_default/x") as Triton takes them.
  static const std::regex kName("^[A-Za-z_][A-Za-z0-9_.:/-]*$");
  std::vector<TensorSpec> specs;
  std::set<std::string> names;
  for (const Json& entry : *it) {
    const std::string where = std::string(key) + "[" + std::to_string(specs.size()) + "]";
    if (!entry.is_object() || entry.size() != 3) {
      return Invalid(where + " must have exactly name, dtype, shape");
    }
    TensorSpec spec;
    CHORUS_ASSIGN_OR_RETURN(spec.name, String(entry, "name", where));
    CHORUS_ASSIGN_OR_RETURN(spec.dtype, String(entry, "dtype", where));
    if (!std::regex_match(spec.name, kName)) return Invalid(where + ".name is not a valid name");
    if (!names.insert(spec.name).second) return Invalid(where + ": duplicate name " + spec.name);
    if (DtypeByName(spec.dtype) == nullptr) return Invalid(where + ": unknown dtype " + spec.dtype);
    auto shape = entry.find("shape");
    if (shape == entry.end() || !shape->is_array()) return Invalid(where + ".shape must be a list");
    for (const Json& dim : *shape) {
      if (!dim.is_number_integer() || dim.get<int64_t>() < -1) {
        return Invalid(where + ".shape must hold integers >= -1");
      }
      spec.shape.push_back(dim.get<int64_t>());
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

Status ParseEntryPoint(const Json& manifest, EntryPoint* entry) {
  auto it = manifest.find("entry_point");
  if (it == manifest.end() || !it->is_object()) return Invalid("entry_point must be an object");
  CHORUS_ASSIGN_OR_RETURN(entry->kind, String(*it, "kind", "entry_point"));
  if (entry->kind == package_format::kEntryPointPickle) {
    CHORUS_ASSIGN_OR_RETURN(entry->package, String(*it, "package", "entry_point"));
    CHORUS_ASSIGN_OR_RETURN(entry->resource, String(*it, "resource", "entry_point"));
  } else if (entry->kind == package_format::kEntryPointFactory) {
    CHORUS_ASSIGN_OR_RETURN(entry->module, String(*it, "module", "entry_point"));
    CHORUS_ASSIGN_OR_RETURN(entry->factory, String(*it, "factory", "entry_point"));
  } else {
    return Invalid("entry_point.kind must be \"pickle\" or \"factory\"");
  }
  return OkStatus();
}

Status ParseFiles(const Json& manifest, std::map<std::string, FileDigest>* files) {
  auto it = manifest.find("files");
  if (it == manifest.end() || !it->is_object()) return Invalid("files must be an object");
  static const std::regex kHex("^[0-9a-f]{64}$");
  for (const auto& [name, info] : it->items()) {
    FileDigest digest;
    if (!info.is_object()) return Invalid("files[" + name + "] must be an object");
    CHORUS_ASSIGN_OR_RETURN(digest.sha256, String(info, "sha256", "files[" + name + "]"));
    CHORUS_ASSIGN_OR_RETURN(int64_t size, NonNegative(info, "size", "files[" + name + "]"));
    if (!std::regex_match(digest.sha256, kHex)) {
      return Invalid("files[" + name + "].sha256 must be 64 lowercase hex digits");
    }
    digest.size = static_cast<uint64_t>(size);
    (*files)[name] = std::move(digest);
  }
  return OkStatus();
}

// inputs, outputs and batching: a manifest's signature part.
Status ParseSignatureFields(const Json& json, bool batching_required, Manifest* manifest) {
  CHORUS_ASSIGN_OR_RETURN(manifest->inputs, Specs(json, "inputs"));
  CHORUS_ASSIGN_OR_RETURN(manifest->outputs, Specs(json, "outputs"));
  auto batching = json.find("batching");
  if (batching == json.end() && !batching_required) return OkStatus();
  if (batching == json.end() || !batching->is_object() || !batching->contains("batchable") ||
      !(*batching)["batchable"].is_boolean()) {
    return Invalid("batching.batchable must be a bool");
  }
  manifest->batching.batchable = (*batching)["batchable"].get<bool>();
  CHORUS_ASSIGN_OR_RETURN(manifest->batching.batch_dim,
                          NonNegative(*batching, "batch_dim", "batching"));
  CHORUS_ASSIGN_OR_RETURN(manifest->batching.max_batch_size,
                          NonNegative(*batching, "max_batch_size", "batching"));
  return OkStatus();
}

}  // namespace

StatusOr<Manifest> ParseManifest(std::string_view text) {
  Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return Invalid("not valid JSON");
  if (!json.is_object()) return Invalid("must be a JSON object");
  Manifest manifest;
  manifest.json = std::string(text);
  auto format = json.find("format");
  if (format == json.end() || *format != package_format::kFormatName) {
    return Invalid(std::string("format must be \"") + package_format::kFormatName + "\"");
  }
  auto version = json.find("format_version");
  if (version == json.end() || !version->is_number_integer() ||
      version->get<int>() != package_format::kFormatVersion) {
    return Invalid("unsupported format_version (this reader knows " +
                   std::to_string(package_format::kFormatVersion) + ")");
  }
  manifest.format_version = package_format::kFormatVersion;
  auto model = json.find("model");
  if (model == json.end() || !model->is_object()) return Invalid("model must be an object");
  CHORUS_ASSIGN_OR_RETURN(manifest.model_name, String(*model, "name", "model"));
  CHORUS_ASSIGN_OR_RETURN(manifest.model_version, String(*model, "version", "model"));
  CHORUS_RETURN_IF_ERROR(ParseEntryPoint(json, &manifest.entry_point));
  CHORUS_RETURN_IF_ERROR(ParseSignatureFields(json, /*batching_required=*/true, &manifest));
  CHORUS_ASSIGN_OR_RETURN(manifest.device, String(json, "device", "manifest"));
  if (!std::regex_match(manifest.device, std::regex("cpu|cuda(:[0-9]+)?"))) {
    return Invalid("device must be \"cpu\", \"cuda\" or \"cuda:N\"");
  }
  CHORUS_RETURN_IF_ERROR(ParseFiles(json, &manifest.files));
  return manifest;
}

StatusOr<Manifest> ParseSignature(std::string_view text) {
  Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return Invalid("not valid JSON");
  if (!json.is_object()) return Invalid("must be a JSON object");
  for (const auto& [key, value] : json.items()) {
    if (key != "inputs" && key != "outputs" && key != "batching") {
      return Invalid("unknown key " + key + " (inputs, outputs, batching)");
    }
  }
  Manifest manifest;
  manifest.json = std::string(text);
  manifest.device = "cpu";
  CHORUS_RETURN_IF_ERROR(ParseSignatureFields(json, /*batching_required=*/false, &manifest));
  return manifest;
}

}  // namespace chorus
