#include "server/src/service_context.h"

#include "server/src/grpc_status.h"
#include "server/src/model_repository.h"

namespace chorus {

BackgroundRunner::BackgroundRunner()
    : thread_([this] {
        while (true) {
          std::function<void()> work;
          {
            MutexLock lock(&mu_);
            while (work_.empty() && !stopping_) changed_.Wait(&mu_);
            if (work_.empty()) return;
            work = std::move(work_.front());
            work_.pop_front();
          }
          work();
        }
      }) {}

BackgroundRunner::~BackgroundRunner() { Stop(); }

bool BackgroundRunner::Post(std::function<void()> work) {
  {
    MutexLock lock(&mu_);
    if (stopping_) return false;
    work_.push_back(std::move(work));
  }
  changed_.Signal();
  return true;
}

void BackgroundRunner::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  changed_.SignalAll();
  // Two stoppers at once: std::thread::join is not safe to race, so one joins
  // while the other waits for it.
  MutexLock join(&join_mu_);
  if (thread_.joinable()) thread_.join();
}

Status ServiceContext::Authorize(const grpc::CallbackServerContext& call) const {
  if (auth_token.empty()) return OkStatus();
  auto range = call.client_metadata().equal_range("authorization");
  for (auto it = range.first; it != range.second; ++it) {
    if (Authorize(std::string_view(it->second.data(), it->second.size())).ok()) return OkStatus();
  }
  return Authorize(std::string_view());
}

Status ServiceContext::Authorize(std::string_view authorization) const {
  if (auth_token.empty() || authorization == "Bearer " + auth_token) return OkStatus();
  return Status(StatusCode::kUnauthenticated,
                "missing or wrong bearer token (header \"authorization: Bearer <token>\")");
}

std::chrono::steady_clock::time_point ClientDeadline(const grpc::CallbackServerContext& call) {
  using Steady = std::chrono::steady_clock;
  const auto client = call.deadline();
  if (client == std::chrono::system_clock::time_point::max()) return Steady::time_point::max();
  return Steady::now() +
         std::chrono::duration_cast<Steady::duration>(client - std::chrono::system_clock::now());
}

bool ServiceContext::Ready() const {
  return ready.load() && (!strict_readiness || repository->AllLoaded());
}

grpc::ServerUnaryReactor* FinishCall(grpc::CallbackServerContext* ctx, const Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace chorus
