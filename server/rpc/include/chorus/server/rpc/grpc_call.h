// Helpers every gRPC handler of the server uses to check and finish a call.
#ifndef CHORUS_SERVER_RPC_GRPC_CALL_H_
#define CHORUS_SERVER_RPC_GRPC_CALL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "chorus/common/status.h"
#include "chorus/server/rpc/authorizer.h"

namespace chorus {

// `authorizer`'s answer for the call's "authorization" metadata (any of its
// values). Any thread.
Status AuthorizeCall(const Authorizer& authorizer, const grpc::CallbackServerContext& call);

// The client's deadline for `call` on the steady clock; time_point::max()
// when it set none.
std::chrono::steady_clock::time_point ClientDeadline(const grpc::CallbackServerContext& call);

// Finishes a unary call with `status` on the call's default reactor.
grpc::ServerUnaryReactor* FinishCall(grpc::CallbackServerContext* ctx, const Status& status);

// Finishes the unary call `ctx` with `expr`'s error, if any, and returns its reactor.
#define CHORUS_FINISH_CALL_IF_ERROR(ctx, expr)                                  \
  do {                                                                          \
    ::chorus::Status chorus_call_status_ = (expr);                              \
    if (!chorus_call_status_.ok()) return FinishCall(ctx, chorus_call_status_); \
  } while (0)

}  // namespace chorus

#endif  // CHORUS_SERVER_RPC_GRPC_CALL_H_
