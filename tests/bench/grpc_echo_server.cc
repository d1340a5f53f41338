// bench_grpc_echo: a gRPC server of the inference service that answers
// ModelInfer with the request's inputs as its outputs and does nothing else,
// on gRPC's callback API as chorus-server is: what a ModelInfer of a given
// size costs in gRPC and protobuf alone, the floor bench_serve compares
// chorus' request path with. Prints "listening on port N", serves until killed.
//
//   --handoff sleep  each ModelInfer is answered by one worker thread that
//                    waits on a condition variable, as a scheduler's worker
//                    does: the cost of the one thread hop a server with a
//                    request queue makes (a futex wake-up of an idle thread)
//   --handoff spin   the same worker, polling instead of sleeping: the hop
//                    without the wake-up
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>

#include "chorus/common/thread_annotations.h"
#include "chorus/inference/grpc_service.grpc.pb.h"

namespace {

void Echo(const inference::ModelInferRequest& request, inference::ModelInferResponse* response) {
  response->set_model_name(request.model_name());
  response->set_id(request.id());
  for (const auto& input : request.inputs()) {
    auto* output = response->add_outputs();
    output->set_name(input.name());
    output->set_datatype(input.datatype());
    *output->mutable_shape() = input.shape();
  }
  *response->mutable_raw_output_contents() = request.raw_input_contents();
}

// One worker thread running what is posted to it, in order.
class Worker {
 public:
  explicit Worker(bool spin) : spin_(spin), thread_([this] { Run(); }) {}
  ~Worker() {
    {
      chorus::MutexLock lock(&mu_);
      stopping_ = true;
      pending_.store(true);
    }
    ready_.Signal();
    thread_.join();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void Post(std::function<void()> work) CHORUS_EXCLUDES(mu_) {
    {
      chorus::MutexLock lock(&mu_);
      queue_.push_back(std::move(work));
      pending_.store(true, std::memory_order_release);
    }
    if (!spin_) ready_.Signal();
  }

 private:
  void Run() CHORUS_EXCLUDES(mu_) {
    for (;;) {
      if (spin_) {
        while (!pending_.load(std::memory_order_acquire)) __builtin_ia32_pause();
      }
      std::function<void()> work;
      {
        chorus::MutexLock lock(&mu_);
        while (queue_.empty() && !stopping_) ready_.Wait(&mu_);
        if (queue_.empty()) return;
        work = std::move(queue_.front());
        queue_.pop_front();
        pending_.store(!queue_.empty(), std::memory_order_release);
      }
      work();
    }
  }

  const bool spin_;
  chorus::Mutex mu_;
  chorus::CondVar ready_;
  std::deque<std::function<void()>> queue_ CHORUS_GUARDED_BY(mu_);
  bool stopping_ CHORUS_GUARDED_BY(mu_) = false;
  std::atomic<bool> pending_{false};  // the spinning worker's flag: queue_ is not empty
  std::thread thread_;
};

class EchoService final : public inference::GRPCInferenceService::CallbackService {
 public:
  explicit EchoService(Worker* worker) : worker_(worker) {}

 private:
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (worker_ == nullptr) {
      Echo(*request, response);
      reactor->Finish(grpc::Status::OK);
    } else {
      worker_->Post([=] {
        Echo(*request, response);
        reactor->Finish(grpc::Status::OK);
      });
    }
    return reactor;
  }
  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* response) override {
    response->set_live(true);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  Worker* const worker_;
};

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<Worker> worker;
  if (argc == 3 && std::strcmp(argv[1], "--handoff") == 0) {
    worker = std::make_unique<Worker>(std::strcmp(argv[2], "spin") == 0);
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: bench_grpc_echo [--handoff sleep|spin]\n");
    return 2;
  }
  EchoService service(worker.get());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return 1;
  std::printf("listening on port %d\n", port);
  std::fflush(stdout);
  server->Wait();
  return 0;
}
