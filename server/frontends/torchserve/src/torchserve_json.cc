#include "server/frontends/torchserve/src/torchserve_json.h"

#include "chorus/server/frontends/http/http_status.h"

namespace chorus::torchserve_json {

std::string Pretty(const nlohmann::ordered_json& json) {
  return json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

const char* ErrorType(int code) {
  switch (code) {
    case 400:
      return "BadRequestException";
    case 404:
      return "ModelNotFoundException";
    case 409:
      return "ConflictStatusException";
    case 413:
      return "RequestTooLargeException";
    case 503:
      return "ServiceUnavailableException";
    default:
      return "InternalServerException";
  }
}

std::string ErrorBody(int code, const std::string& type, const std::string& message) {
  return Pretty({{"code", code}, {"type", type}, {"message", message}});
}

void ReplyError(const Status& status, httplib::Response& response) {
  const int code =
      status.code() == StatusCode::kAlreadyExists ? 409 : HttpStatusCode(status.code());
  response.status = code;
  response.set_content(ErrorBody(code, ErrorType(code), std::string(status.message())), kJson);
}

void ReplyStatus(const std::string& message, httplib::Response& response, int code) {
  response.status = code;
  response.set_content(Pretty({{"status", message}}), kJson);
}

}  // namespace chorus::torchserve_json
