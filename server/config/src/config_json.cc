#include "server/config/src/config_json.h"

#include <algorithm>

namespace chorus::config_json {

Status KeyError(const std::string& key, const std::string& why) {
  return InvalidArgumentError("config.json: " + key + ": " + why);
}

Status CheckKeys(const Json& object, const std::string& prefix,
                 std::initializer_list<const char*> known) {
  for (const auto& item : object.items()) {
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return item.key() == k; })) {
      std::string names;
      for (const char* k : known) names += (names.empty() ? "" : ", ") + std::string(k);
      return KeyError(prefix + item.key(), "unknown key (known: " + names + ")");
    }
  }
  return OkStatus();
}

StatusOr<std::string> StringAt(const Json& value, const std::string& key) {
  if (!value.is_string() || value.get<std::string>().empty()) {
    return KeyError(key, "must be a non-empty string");
  }
  return value.get<std::string>();
}

StatusOr<int64_t> IntAt(const Json& value, const std::string& key, int64_t minimum) {
  if (!value.is_number_integer() || value.get<int64_t>() < minimum) {
    return KeyError(key, "must be an integer >= " + std::to_string(minimum));
  }
  return value.get<int64_t>();
}

StatusOr<std::vector<std::vector<std::string>>> ObjectsAt(
    const Json& list, const std::string& key, std::initializer_list<const char*> fields) {
  if (!list.is_array()) return KeyError(key, "must be a list");
  std::vector<std::vector<std::string>> items;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = key + "[" + std::to_string(i) + "]";
    if (!list[i].is_object()) return KeyError(at, "must be an object");
    CHORUS_RETURN_IF_ERROR(CheckKeys(list[i], at + ".", fields));
    std::vector<std::string> values;
    for (const char* field : fields) {
      if (!list[i].contains(field)) return KeyError(at + "." + field, "is required");
      CHORUS_ASSIGN_OR_RETURN(std::string value, StringAt(list[i][field], at + "." + field));
      values.push_back(std::move(value));
    }
    items.push_back(std::move(values));
  }
  return items;
}

}  // namespace chorus::config_json
