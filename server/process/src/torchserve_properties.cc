#include "server/process/src/torchserve_properties.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <optional>

#include "chorus/common/numbers.h"

namespace chorus {
namespace {

std::string_view Trimmed(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

bool Given(const std::vector<std::string>& given, const std::string& flag) {
  return std::find(given.begin(), given.end(), flag) != given.end();
}

// "a.mar,b.mar" as --models takes it.
std::vector<std::string> Split(const std::string& list) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string_view item = Trimmed(std::string_view(list).substr(start, comma - start));
    if (!item.empty()) items.emplace_back(item);
    start = comma + 1;
  }
  return items;
}

// `value` as an integer in [0, most]; INVALID_ARGUMENT naming `key` otherwise.
StatusOr<int> CountOf(const std::string& key, const std::string& value, int most) {
  const std::optional<int64_t> count = ParseNonNegativeInt64(value);
  if (!count || *count > most) {
    return InvalidArgumentError(key + ": '" + value + "' is not a count (0-" +
                                std::to_string(most) + ")");
  }
  return static_cast<int>(*count);
}

// One model's settings in models= or model_snapshot ({"version": {"marName",
// "defaultVersion", "minWorkers", ...}}) over `base`: the default version's,
// else the first one's. Sets `mar` to its marName ("" when none).
StatusOr<TorchServeModelSettings> SettingsOfModel(const std::string& name,
                                                  const nlohmann::json& versions,
                                                  const TorchServeModelSettings& base,
                                                  std::string* mar) {
  if (!versions.is_object() || versions.empty()) {
    return InvalidArgumentError("model " + name + ": not an object of versions");
  }
  const nlohmann::json* chosen = &versions.begin().value();
  for (const auto& [version, settings] : versions.items()) {
    if (settings.is_object() && settings.value("defaultVersion", false)) chosen = &settings;
  }
  if (!chosen->is_object()) return InvalidArgumentError("model " + name + ": not an object");
  TorchServeModelSettings settings = base;
  // The keys TorchServe reads from models= (ConfigManager.getJsonIntValue).
  for (const char* key :
       {"minWorkers", "maxWorkers", "batchSize", "maxBatchDelay", "responseTimeout"}) {
    auto found = chosen->find(key);
    if (found == chosen->end()) continue;
    if (!found->is_number_integer() || found->get<int64_t>() < 0 ||
        found->get<int64_t>() > 1'000'000'000) {
      return InvalidArgumentError("model " + name + ": " + key + " is not a count");
    }
    SetTorchServeSetting(key, found->get<int64_t>(), &settings);
  }
  *mar = chosen->value("marName", "");
  return settings;
}

// config.properties' models= or model_snapshot (whose "models" member has the
// same form) applied to `options`, over its TorchServe defaults;
// model_snapshot's models are also served unless the command line or
// load_models names others.
Status ApplyModelSettings(const std::string& key, const std::string& value, bool load_given,
                          ServerOptions* options) {
  const nlohmann::json parsed = nlohmann::json::parse(value, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return InvalidArgumentError(key + " is not a JSON object");
  }
  const bool snapshot = key == "model_snapshot";
  const nlohmann::json& models =
      snapshot ? parsed.value("models", nlohmann::json::object()) : parsed;
  if (!models.is_object()) return InvalidArgumentError(key + ": \"models\" is not an object");
  for (const auto& [name, versions] : models.items()) {
    std::string mar;
    auto known = options->torchserve_model_settings.find(name);  // model_snapshot's
    StatusOr<TorchServeModelSettings> settings = SettingsOfModel(
        name, versions,
        known == options->torchserve_model_settings.end() ? options->torchserve_defaults
                                                          : known->second,
        &mar);
    if (!settings.ok()) return settings.status().Annotate(key);
    options->torchserve_model_settings[name] = *settings;
    if (snapshot && !load_given) {
      if (mar.empty()) return InvalidArgumentError(key + ": model " + name + " has no marName");
      options->torchserve_models.push_back(name + "=" + mar);
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::map<std::string, std::string>> ParseProperties(std::string_view text) {
  std::map<std::string, std::string> properties;
  int number = 0;
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    const std::string_view line = Trimmed(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
    ++number;
    if (line.empty() || line[0] == '#' || line[0] == '!') continue;
    const size_t separator = line.find_first_of("=:");
    const std::string_view key = Trimmed(line.substr(0, separator));
    if (key.empty()) {
      return InvalidArgumentError("line " + std::to_string(number) + " has no key");
    }
    properties[std::string(key)] =
        separator == std::string_view::npos ? "" : std::string(Trimmed(line.substr(separator + 1)));
  }
  return properties;
}

std::map<std::string, std::string> WithEnvironment(std::map<std::string, std::string> properties,
                                                   const std::vector<std::string>& environment) {
  constexpr std::string_view kPrefix = "TS_";
  std::map<std::string, std::string> variables;
  for (const std::string& entry : environment) {
    const size_t equals = entry.find('=');
    if (equals == std::string::npos || entry.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    std::string key = entry.substr(kPrefix.size(), equals - kPrefix.size());
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    variables[key] = entry.substr(equals + 1);
  }
  const auto enabled = [](const std::map<std::string, std::string>& map) {
    auto found = map.find("enable_envvars_config");
    if (found == map.end()) return false;
    std::string value = found->second;  // Java's parseBoolean: any case
    std::transform(value.begin(), value.end(), value.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return value == "true";
  };
  if (!enabled(properties) && !enabled(variables)) return properties;
  for (auto& [key, value] : variables) properties[key] = std::move(value);
  return properties;
}

StatusOr<int> PortOfAddress(const std::string& address) {
  const size_t scheme = address.find("://");
  const std::string kind = scheme == std::string::npos ? "" : address.substr(0, scheme);
  if (kind != "http" && kind != "https") {
    return InvalidArgumentError("'" + address + "' is not an http or https address");
  }
  const std::string rest = address.substr(scheme + 3);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || rest.find(']', colon) != std::string::npos) {
    return kind == "http" ? 80 : 443;
  }
  const std::string digits = rest.substr(colon + 1, rest.find('/', colon) - colon - 1);
  const std::optional<int64_t> port = ParseNonNegativeInt64(digits);
  if (!port || *port == 0 || *port > 65535) {
    return InvalidArgumentError("'" + address + "' has no valid port");
  }
  return static_cast<int>(*port);
}

StatusOr<std::vector<std::string>> ApplyTorchServeProperties(
    const std::map<std::string, std::string>& properties, const std::vector<std::string>& given,
    ServerOptions* options) {
  const std::map<std::string, std::pair<std::string, int*>> addresses = {
      {"inference_address", {"torchserve-inference-port", &options->torchserve_inference_port}},
      {"management_address", {"torchserve-management-port", &options->torchserve_management_port}},
      {"metrics_address", {"torchserve-metrics-port", &options->torchserve_metrics_port}},
  };
  std::vector<std::string> ignored;
  for (const auto& [key, value] : properties) {
    if (auto address = addresses.find(key); address != addresses.end()) {
      StatusOr<int> port = PortOfAddress(value);
      if (!port.ok()) return port.status().Annotate(key);
      if (!Given(given, address->second.first)) *address->second.second = *port;
    } else if (key == "model_store") {
      if (!Given(given, "model-repository")) options->model_repository = value;
    } else if (key == "load_models") {
      if (!Given(given, "models")) options->torchserve_models = Split(value);
    } else if (key == "enable_metrics_api") {
      if (value == "false" && !Given(given, "torchserve-metrics-port")) {
        options->torchserve_metrics_port = -1;
      }
    } else if (key == "default_workers_per_model") {
      CHORUS_ASSIGN_OR_RETURN(int workers, CountOf(key, value, kMaxTorchServeWorkers));
      if (!Given(given, "torchserve-default-workers"))
        options->torchserve_defaults.min_workers = workers;
    } else if (key == "default_response_timeout") {
      CHORUS_ASSIGN_OR_RETURN(int seconds, CountOf(key, value, 1'000'000));
      options->torchserve_defaults.response_timeout = std::chrono::seconds(seconds);
    } else if (key == "service_envelope") {
      if (value != "json" && value != "body" && value != "kserve" && value != "kservev2") {
        return InvalidArgumentError(key + ": '" + value +
                                    "' is not an envelope (json, body, kserve, kservev2)");
      }
      options->torchserve_service_envelope = value;
    } else if (key == "enable_model_api") {
      if (!Given(given, "enable-model-api")) options->torchserve_model_api = value == "true";
    } else if (key == "models" || key == "model_snapshot" || key == "enable_envvars_config") {
      // Below, over the defaults; read by WithEnvironment.
    } else if (key != "disable_token_authorization" || value != "true") {
      // Without --auth-token chorus asks for no token: disabled is its behaviour.
      ignored.push_back(key);
    }
  }
  const bool load_given = Given(given, "models") || properties.count("load_models") > 0;
  for (const char* key : {"model_snapshot", "models"}) {  // models= wins
    if (auto found = properties.find(key); found != properties.end()) {
      CHORUS_RETURN_IF_ERROR(ApplyModelSettings(key, found->second, load_given, options));
    }
  }
  return ignored;
}

}  // namespace chorus
