// TorchServe's config.properties (its --ts-config) read onto chorus-server's
// options: the keys that mean something to chorus (the API addresses'
// ports, model_store, load_models, default_workers_per_model,
// default_response_timeout, models and model_snapshot, service_envelope,
// enable_metrics_api, enable_model_api) are applied; every
// other key is named as ignored. Read by the supervisor, before any port is
// picked. Thread-compatible functions.
#ifndef CHORUS_SERVER_PROCESS_SRC_TORCHSERVE_PROPERTIES_H_
#define CHORUS_SERVER_PROCESS_SRC_TORCHSERVE_PROPERTIES_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/server/server.h"

namespace chorus {

// A Java properties file's keys and values ("key=value" or "key: value" a
// line; '#' and '!' comment lines; no escapes, no continuation lines, which
// TorchServe's keys do not use). Errors: the file's, or a line with no key.
StatusOr<std::map<std::string, std::string>> ParseProperties(std::string_view text);

// `properties` with TorchServe's environment variables applied where they
// ask for it (enable_envvars_config=true, in the file or as
// TS_ENABLE_ENVVARS_CONFIG): each TS_<KEY> of `environment` ("NAME=value"
// entries) sets key <key>, lowercased, over the file's, as TorchServe does.
std::map<std::string, std::string> WithEnvironment(std::map<std::string, std::string> properties,
                                                   const std::vector<std::string>& environment);

// The port of an address as TorchServe writes them ("http://127.0.0.1:8080",
// "https://0.0.0.0:8443"; "http://host" is 80, "https://host" 443).
// INVALID_ARGUMENT for anything else.
StatusOr<int> PortOfAddress(const std::string& address);

// Applies `properties` to `options` where the command line left the option
// unset (`given`: the flags it set, by their long name without "--").
// Returns the keys chorus ignores. Errors name the key.
StatusOr<std::vector<std::string>> ApplyTorchServeProperties(
    const std::map<std::string, std::string>& properties, const std::vector<std::string>& given,
    ServerOptions* options);

}  // namespace chorus

#endif  // CHORUS_SERVER_PROCESS_SRC_TORCHSERVE_PROPERTIES_H_
