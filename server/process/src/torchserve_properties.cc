#include "server/process/src/torchserve_properties.h"

#include <algorithm>
#include <cctype>
#include <charconv>

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
    return found != map.end() && found->second == "true";
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
  int port = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (error != std::errc() || end != digits.data() + digits.size() || port <= 0 || port > 65535) {
    return InvalidArgumentError("'" + address + "' has no valid port");
  }
  return port;
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
      int workers = 0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), workers);
      if (error != std::errc() || end != value.data() + value.size() || workers < 0 ||
          workers > 256) {
        return InvalidArgumentError(key + ": '" + value + "' is not a count of workers (0-256)");
      }
      if (!Given(given, "torchserve-default-workers"))
        options->torchserve_default_workers = workers;
    } else if (key == "enable_model_api") {
      if (!Given(given, "enable-model-api")) options->torchserve_model_api = value == "true";
    } else if (key == "enable_envvars_config") {
      // Read by WithEnvironment.
    } else if (key != "disable_token_authorization" || value != "true") {
      // Without --auth-token chorus asks for no token: disabled is its behaviour.
      ignored.push_back(key);
    }
  }
  return ignored;
}

}  // namespace chorus
