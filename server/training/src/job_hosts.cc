#include "chorus/server/training/job_hosts.h"

#include <thread>

#include "chorus/common/thread_annotations.h"

namespace chorus {
namespace {

std::unique_ptr<JobHosts::Stub> Connect(const std::string& address) {
  grpc::ChannelArguments args;
  // Batches and evaluation outputs travel between hosts whole.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return training::TrainingService::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

// One call to another host, and where it is.
struct HostCall {
  enum class State {
    kWaiting,   // no answer yet
    kAnswered,  // `status` is the host's answer
    kSilent,    // cancelled here for not answering in time
  };
  grpc::ClientContext context;
  grpc::Status status;
  State state = State::kWaiting;
};

// How long the other hosts have to answer once this host's part failed.
constexpr std::chrono::milliseconds kAfterFailure{3000};

// Every host's failure, named; the first one's code. `wait` is how long the
// others had once host 0 (this one) was done with `here`.
Status Summarize(const std::vector<std::string>& hosts, const Status& here,
                 const std::vector<std::unique_ptr<HostCall>>& calls,
                 std::chrono::milliseconds wait) {
  Status first = here;
  std::string failures = here.ok() ? "" : "host 0 (" + hosts[0] + "): " + here.message();
  for (size_t i = 0; i < calls.size(); ++i) {
    const grpc::Status& status = calls[i]->status;
    if (status.ok()) continue;
    const bool silent = calls[i]->state == HostCall::State::kSilent;
    std::string why =
        silent
            ? "no answer within " + std::to_string(wait.count()) + " ms of host 0 " +
                  (here.ok() ? "finishing: lost or cut off" : "failing (waiting, lost or cut off)")
            : status.error_message();
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) why = "unreachable: " + why;
    if (!failures.empty()) failures += "; ";
    failures += "host " + std::to_string(i + 1) + " (" + hosts[i + 1] + "): " + why;
    if (first.ok()) {
      first = Status(
          silent ? StatusCode::kUnavailable : static_cast<StatusCode>(status.error_code()), "");
    }
  }
  if (first.ok()) return OkStatus();
  return Status(first.code(), failures);
}

}  // namespace

std::string HostOfAddress(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    return close == std::string::npos ? address : address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

JobHosts::JobHosts(std::vector<std::string> hosts, std::string instance, std::string auth_token,
                   std::chrono::milliseconds grace)
    : hosts_(std::move(hosts)),
      instance_(std::move(instance)),
      auth_token_(std::move(auth_token)),
      grace_(grace) {
  for (size_t h = 1; h < hosts_.size(); ++h) stubs_.push_back(Connect(hosts_[h]));
}

void JobHosts::Mark(grpc::ClientContext& context) const {
  context.AddMetadata(kDriverMetadata, instance_);
  if (!auth_token_.empty()) context.AddMetadata("authorization", "Bearer " + auth_token_);
}

Status JobHosts::Run(const std::function<Status()>& local, const RemoteCall& remote) const {
  const size_t others = stubs_.size();
  std::vector<std::unique_ptr<HostCall>> calls;
  Mutex mu;
  CondVar answered;
  size_t pending = others;  // guarded by mu
  std::vector<std::thread> threads;
  for (size_t i = 0; i < others; ++i) {
    calls.push_back(std::make_unique<HostCall>());
    HostCall* call = calls.back().get();
    Mark(call->context);
    threads.emplace_back([&, call, i] {
      grpc::Status status = remote(static_cast<int>(i + 1), *stubs_[i], call->context);
      MutexLock lock(&mu);
      call->status = std::move(status);
      if (call->state == HostCall::State::kWaiting) call->state = HostCall::State::kAnswered;
      --pending;
      answered.SignalAll();
    });
  }
  const Status here = local();
  // The others have `grace_` to answer once this host is done. When it
  // failed, its partners' collectives fail at about the same time, so a host
  // still silent after a few seconds is lost or cut off.
  const auto wait = here.ok() ? grace_ : std::min(grace_, kAfterFailure);
  {
    MutexLock lock(&mu);
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (pending > 0 && answered.WaitUntil(&mu, deadline)) {
    }
    for (auto& call : calls) {
      if (call->state != HostCall::State::kWaiting) continue;
      call->state = HostCall::State::kSilent;
      call->context.TryCancel();
    }
  }
  for (auto& thread : threads) thread.join();
  return Summarize(hosts_, here, calls, wait);
}

Status JobHosts::RunOnOthers(const RemoteCall& remote, std::chrono::milliseconds timeout) const {
  Status first;
  std::vector<std::thread> threads;
  std::vector<grpc::Status> results(stubs_.size());
  for (size_t i = 0; i < stubs_.size(); ++i) {
    threads.emplace_back([&, i] {
      grpc::ClientContext context;
      Mark(context);
      context.set_deadline(std::chrono::system_clock::now() + timeout);
      results[i] = remote(static_cast<int>(i + 1), *stubs_[i], context);
    });
  }
  for (auto& thread : threads) thread.join();
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok() && first.ok()) {
      first = Status(static_cast<StatusCode>(results[i].error_code()),
                     "host " + std::to_string(i + 1) + " (" + hosts_[i + 1] +
                         "): " + results[i].error_message());
    }
  }
  return first;
}

Status JobHosts::DeleteOnOthers(const std::string& job_id,
                                std::chrono::milliseconds timeout) const {
  return RunOnOthers(
      [&job_id](int, Stub& stub, grpc::ClientContext& context) {
        training::DeleteJobRequest request;
        request.set_job_id(job_id);
        training::DeleteJobResponse response;
        return stub.DeleteJob(&context, request, &response);
      },
      timeout);
}

}  // namespace chorus
