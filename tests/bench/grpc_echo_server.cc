// bench_grpc_echo: a gRPC server of the inference service that answers
// ModelInfer with the request's inputs as its outputs and does nothing else,
// on gRPC's callback API as chorus-server is: what a ModelInfer of a given
// size costs in gRPC and protobuf alone, the floor bench_serve compares
// chorus' request path with. Prints "listening on port N", serves until killed.
#include <grpcpp/grpcpp.h>

#include <cstdio>

#include "chorus/inference/grpc_service.grpc.pb.h"

namespace {

class EchoService final : public inference::GRPCInferenceService::CallbackService {
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override {
    response->set_model_name(request->model_name());
    response->set_id(request->id());
    for (const auto& input : request->inputs()) {
      auto* output = response->add_outputs();
      output->set_name(input.name());
      output->set_datatype(input.datatype());
      *output->mutable_shape() = input.shape();
    }
    *response->mutable_raw_output_contents() = request->raw_input_contents();
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
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
};

}  // namespace

int main() {
  EchoService service;
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
