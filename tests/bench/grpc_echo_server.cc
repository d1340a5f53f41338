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
//   --model-config F a Triton config.pbtxt: the server also answers the calls
//                    perf_analyzer makes before it measures (the model's
//                    metadata, config and statistics, readiness), so that it
//                    can drive the echo as that model (bench_triton's floor)
//   --port P         listen on P (default: a free port)
#include <absl/synchronization/mutex.h>
#include <google/protobuf/text_format.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include "chorus/common/thread_annotations.h"
#include "chorus/inference/grpc_service.grpc.pb.h"
#include "chorus/inference/model_config.pb.h"

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

// The metadata Triton gives for `config`'s model (its tensors, as declared).
inference::ModelMetadataResponse MetadataOf(const inference::ModelConfig& config) {
  inference::ModelMetadataResponse metadata;
  metadata.set_name(config.name());
  metadata.add_versions("1");
  metadata.set_platform(config.backend());
  auto describe = [&](const auto& spec, auto* tensor) {
    tensor->set_name(spec.name());
    tensor->set_datatype(inference::DataType_Name(spec.data_type()).substr(5));  // TYPE_FP32
    if (config.max_batch_size() > 0) tensor->add_shape(-1);
    for (int64_t dim : spec.dims()) tensor->add_shape(dim);
  };
  for (const auto& input : config.input()) describe(input, metadata.add_inputs());
  for (const auto& output : config.output()) describe(output, metadata.add_outputs());
  return metadata;
}

class EchoService final : public inference::GRPCInferenceService::CallbackService {
 public:
  EchoService(Worker* worker, std::optional<inference::ModelConfig> config)
      : worker_(worker), config_(std::move(config)) {}

 private:
  // Answers at once on gRPC's thread with `fill`'s response, or NOT_FOUND
  // when no --model-config was given.
  template <typename Response, typename Fill>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, Response* response,
                                   Fill fill) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (!config_) {
      reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "no --model-config"));
    } else {
      fill(*config_, response);
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest*,
                                          inference::ModelMetadataResponse* response) override {
    return Answer(context, response,
                  [](const auto& config, auto* out) { *out = MetadataOf(config); });
  }
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest*,
                                        inference::ModelConfigResponse* response) override {
    return Answer(context, response,
                  [](const auto& config, auto* out) { *out->mutable_config() = config; });
  }
  // The model's statistics, all zero: perf_analyzer reads them around each
  // measurement; an echo keeps none.
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest*,
                                            inference::ModelStatisticsResponse* response) override {
    return Answer(context, response, [](const auto& config, auto* out) {
      auto* stats = out->add_model_stats();
      stats->set_name(config.name());
      stats->set_version("1");
    });
  }
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* response) override {
    return Answer(context, response, [](const auto&, auto* out) { out->set_ready(true); });
  }
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest*,
                                       inference::ModelReadyResponse* response) override {
    return Answer(context, response, [](const auto&, auto* out) { out->set_ready(true); });
  }

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
  const std::optional<inference::ModelConfig> config_;
};

std::optional<inference::ModelConfig> ReadConfig(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  inference::ModelConfig config;
  if (!file || !google::protobuf::TextFormat::ParseFromString(text.str(), &config)) {
    return std::nullopt;
  }
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("bench_grpc_echo: a gRPC inference server that only echoes ModelInfer");
  std::string handoff, config_path;
  int port = 0;
  app.add_option("--handoff", handoff, "answer on a worker thread")
      ->check(CLI::IsMember({"sleep", "spin"}));
  app.add_option("--model-config", config_path, "a config.pbtxt to describe to clients");
  app.add_option("--port", port, "the port (default: a free one)");
  CLI11_PARSE(app, argc, argv);
  std::unique_ptr<Worker> worker;
  if (!handoff.empty()) worker = std::make_unique<Worker>(handoff == "spin");
  std::optional<inference::ModelConfig> config;
  if (!config_path.empty()) {
    config = ReadConfig(config_path);
    if (!config) {
      std::fprintf(stderr, "bench_grpc_echo: %s is no model config\n", config_path.c_str());
      return 2;
    }
  }
  EchoService service(worker.get(), std::move(config));
  // As chorus-server does: no lock-order checks in Debian's (debug-mode) abseil.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return 1;
  std::printf("listening on port %d\n", port);
  std::fflush(stdout);
  server->Wait();
  return 0;
}
