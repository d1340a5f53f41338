// What the gRPC services share: the server's context (repository, interpreters,
// background thread, authorization), a runner for blocking work, and the
// helpers every handler uses to finish a call.
#ifndef CHORUS_SERVER_SERVICE_CONTEXT_H_
#define CHORUS_SERVER_SERVICE_CONTEXT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/package/signature.h"

namespace chorus {

class ModelRepository;

// Runs blocking work (model loads, training operations) off the reactor
// threads, one item at a time, in order. Thread-safe.
class BackgroundRunner {
 public:
  BackgroundRunner();
  // Stop(), then destroys.
  ~BackgroundRunner();

  // Queues `work`. False (and `work` dropped unrun) once Stop has begun.
  [[nodiscard]] bool Post(std::function<void()> work) CHORUS_EXCLUDES(mu_);
  // Refuses further work, finishes what is queued and joins. Idempotent; any
  // thread but the runner's own.
  void Stop() CHORUS_EXCLUDES(mu_);

 private:
  Mutex mu_;
  CondVar changed_;
  std::deque<std::function<void()>> work_ CHORUS_GUARDED_BY(mu_);
  bool stopping_ CHORUS_GUARDED_BY(mu_) = false;
  Mutex join_mu_;
  std::thread thread_;
};

// What the handlers need from the server; owned by it.
struct ServiceContext {
  ModelRepository* repository;
  InterpreterManager* manager;
  BackgroundRunner* background;
  std::string auth_token;
  // When set, training jobs run only archives signed by one of these keys.
  std::shared_ptr<const TrustedKeys> trusted_keys;
  std::chrono::milliseconds request_timeout{0};
  std::atomic<bool> ready{false};  // serving (false before start and while draining)
  // Triton's strict readiness: the server is ready only while every model of
  // the repository that should serve does (quarantined ones aside).
  bool strict_readiness = true;

  // ServerReady's answer, and /v2/health/ready's.
  bool Ready() const;

  // OK when no token is configured or the call carries "authorization: Bearer
  // <auth_token>"; UNAUTHENTICATED otherwise. Any thread.
  Status Authorize(const grpc::CallbackServerContext& call) const;
  // The same for an HTTP request's "authorization" header value.
  Status Authorize(std::string_view authorization) const;
};

// The client's deadline for `call` on the steady clock; time_point::max()
// when it set none.
std::chrono::steady_clock::time_point ClientDeadline(const grpc::CallbackServerContext& call);

// Finishes a unary call with `status` on the call's default reactor.
grpc::ServerUnaryReactor* FinishCall(grpc::CallbackServerContext* ctx, const Status& status);

}  // namespace chorus

#endif  // CHORUS_SERVER_SERVICE_CONTEXT_H_
