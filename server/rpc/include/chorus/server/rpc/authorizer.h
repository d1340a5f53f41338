// server/rpc/: what the server's RPC services share, whatever they serve:
// who may call (a bearer token), the one conversion of a Status to a gRPC
// status, and the helpers a gRPC handler finishes a call with.
//
// Authorizer: with a token configured, every model and training call carries
// "authorization: Bearer <token>" (gRPC metadata or an HTTP header).
#ifndef CHORUS_SERVER_RPC_AUTHORIZER_H_
#define CHORUS_SERVER_RPC_AUTHORIZER_H_

#include <string>
#include <string_view>
#include <utility>

#include "chorus/common/status.h"

namespace chorus {

class Authorizer {
 public:
  // "" lets every call through.
  explicit Authorizer(std::string token = "") : token_(std::move(token)) {}

  // OK when no token is configured or `authorization` (a header's value) is
  // "Bearer <token>"; UNAUTHENTICATED otherwise. Any thread.
  Status Check(std::string_view authorization) const;
  // The token, which this server's own calls to other servers carry ("" = none).
  const std::string& token() const { return token_; }

 private:
  const std::string token_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_RPC_AUTHORIZER_H_
