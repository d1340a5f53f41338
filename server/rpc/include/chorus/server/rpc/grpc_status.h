// The one place a chorus::Status becomes a grpc::Status. Python tracebacks
// never reach clients: only the type and message do (they go to the log).
#ifndef CHORUS_SERVER_RPC_GRPC_STATUS_H_
#define CHORUS_SERVER_RPC_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "chorus/common/status.h"

namespace chorus {

inline grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // The codes share gRPC's numbering (status.h).
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

}  // namespace chorus

#endif  // CHORUS_SERVER_RPC_GRPC_STATUS_H_
