#include "chorus/server/rpc/grpc_call.h"

#include "chorus/server/rpc/grpc_status.h"

namespace chorus {

Status AuthorizeCall(const Authorizer& authorizer, const grpc::CallbackServerContext& call) {
  if (authorizer.token().empty()) return OkStatus();
  auto range = call.client_metadata().equal_range("authorization");
  for (auto it = range.first; it != range.second; ++it) {
    if (authorizer.Check(std::string_view(it->second.data(), it->second.size())).ok()) {
      return OkStatus();
    }
  }
  return authorizer.Check(std::string_view());
}

std::chrono::steady_clock::time_point ClientDeadline(const grpc::CallbackServerContext& call) {
  using Steady = std::chrono::steady_clock;
  const auto client = call.deadline();
  if (client == std::chrono::system_clock::time_point::max()) return Steady::time_point::max();
  return Steady::now() +
         std::chrono::duration_cast<Steady::duration>(client - std::chrono::system_clock::now());
}

grpc::ServerUnaryReactor* FinishCall(grpc::CallbackServerContext* ctx, const Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace chorus
