// Reading config.json's values: each error is INVALID_ARGUMENT naming the
// key ("config.json: <key>: <why>"). Shared by the parsers of model_config.h.
#ifndef CHORUS_SERVER_CONFIG_SRC_CONFIG_JSON_H_
#define CHORUS_SERVER_CONFIG_SRC_CONFIG_JSON_H_

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chorus/common/status.h"

namespace chorus::config_json {

using Json = nlohmann::json;

Status KeyError(const std::string& key, const std::string& why);
// INVALID_ARGUMENT naming the first key of `object` not in `known`.
Status CheckKeys(const Json& object, const std::string& prefix,
                 std::initializer_list<const char*> known);
StatusOr<std::string> StringAt(const Json& value, const std::string& key);
StatusOr<int64_t> IntAt(const Json& value, const std::string& key, int64_t minimum);
// Each item of the list at `key`, an object of `fields` (all required), as strings.
StatusOr<std::vector<std::vector<std::string>>> ObjectsAt(
    const Json& list, const std::string& key, std::initializer_list<const char*> fields);

}  // namespace chorus::config_json

namespace chorus {
struct ModelConfig;
// config.json's "platform" and "ensemble_scheduling" into `out->ensemble`,
// checked against what else `config` says (model_config_ensemble.cc).
Status ParseEnsembleConfig(const config_json::Json& config, ModelConfig* out);
}  // namespace chorus

#endif  // CHORUS_SERVER_CONFIG_SRC_CONFIG_JSON_H_
