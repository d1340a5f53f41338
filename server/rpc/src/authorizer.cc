#include "chorus/server/rpc/authorizer.h"

namespace chorus {

Status Authorizer::Check(std::string_view authorization) const {
  if (token_.empty() || authorization == "Bearer " + token_) return OkStatus();
  return Status(StatusCode::kUnauthenticated,
                "missing or wrong bearer token (header \"authorization: Bearer <token>\")");
}

}  // namespace chorus
