// What TorchServe's APIs share: their JSON (Gson's pretty printing) and
// their error bodies, {"code", "type", "message"}.
#ifndef CHORUS_SERVER_FRONTENDS_TORCHSERVE_SRC_TORCHSERVE_JSON_H_
#define CHORUS_SERVER_FRONTENDS_TORCHSERVE_SRC_TORCHSERVE_JSON_H_

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>

#include "chorus/common/status.h"

namespace chorus::torchserve_json {

inline constexpr char kJson[] = "application/json";

// `json` as TorchServe writes it: two spaces, keys in the order written.
std::string Pretty(const nlohmann::ordered_json& json);
// The exception class TorchServe's frontend names in an error of HTTP status `code`.
const char* ErrorType(int code);
// TorchServe's error body.
std::string ErrorBody(int code, const std::string& type, const std::string& message);
// Answers `status` (an error) as TorchServe's error: its HTTP status
// (http_status.h's mapping; ALREADY_EXISTS is 409) and message.
void ReplyError(const Status& status, httplib::Response& response);
// Answers 200 (or `code`) with {"status": message}.
void ReplyStatus(const std::string& message, httplib::Response& response, int code = 200);

}  // namespace chorus::torchserve_json

#endif  // CHORUS_SERVER_FRONTENDS_TORCHSERVE_SRC_TORCHSERVE_JSON_H_
