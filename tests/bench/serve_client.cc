#include "tests/bench/serve_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "tests/bench/bench_util.h"

namespace chorus::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<inference::GRPCInferenceService::Stub> StubFor(int port) {
  return inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
}

}  // namespace

inference::ModelInferRequest MakeRequest(const std::string& model, int64_t rows) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  input->add_shape(rows);
  input->add_shape(4);
  std::string raw(rows * 4 * sizeof(float), '\0');
  for (size_t i = 0; i < raw.size() / sizeof(float); ++i) {
    reinterpret_cast<float*>(raw.data())[i] = 0.25f * (i % 7);
  }
  request.add_raw_input_contents(raw);
  return request;
}

double GrpcFloorUs(int port, int calls, bool with_deadline) {
  auto stub = StubFor(port);
  std::vector<double> latencies;
  for (int i = 0; i < calls; ++i) {
    grpc::ClientContext context;
    if (with_deadline) {
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    }
    inference::ServerLiveRequest request;
    inference::ServerLiveResponse response;
    auto sent = Clock::now();
    stub->ServerLive(&context, request, &response);
    latencies.push_back(std::chrono::duration<double, std::micro>(Clock::now() - sent).count());
  }
  return Median(latencies);
}

LoadResult Load(int port, const std::string& model, int clients, double seconds) {
  const int channels = std::min(clients, 8);
  std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", c);  // separate connections
    stubs.push_back(inference::GRPCInferenceService::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args)));
  }
  const inference::ModelInferRequest request = MakeRequest(model, 1);
  std::mutex mu;
  std::vector<double> latencies;
  std::atomic<int64_t> errors{0};
  const Clock::time_point end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(seconds));
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      std::vector<double> mine;
      inference::ModelInferResponse response;
      while (Clock::now() < end) {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        auto sent = Clock::now();
        grpc::Status status = stubs[t % channels]->ModelInfer(&context, request, &response);
        mine.push_back(std::chrono::duration<double, std::micro>(Clock::now() - sent).count());
        if (!status.ok()) ++errors;
      }
      std::lock_guard<std::mutex> lock(mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  }
  for (auto& thread : threads) thread.join();
  const double elapsed = SecondsSince(start);
  std::sort(latencies.begin(), latencies.end());
  auto at = [&](double q) {
    return latencies.empty() ? 0 : latencies[static_cast<size_t>(q * (latencies.size() - 1))];
  };
  LoadResult result;
  result.requests = static_cast<int64_t>(latencies.size());
  result.errors = errors;
  result.throughput = latencies.size() / elapsed;
  result.p50_us = at(0.5);
  result.p90_us = at(0.9);
  result.p99_us = at(0.99);
  return result;
}

ServerTimes TrivialServerTimes(int port) {
  auto stub = StubFor(port);
  grpc::ClientContext context;
  inference::ModelStatisticsRequest request;
  request.set_name("trivial");
  inference::ModelStatisticsResponse response;
  ServerTimes times;
  if (!stub->ModelStatistics(&context, request, &response).ok()) return times;
  for (const auto& model : response.model_stats()) {
    const auto& stats = model.inference_stats();
    times.count += stats.success().count();
    times.queue_ns += stats.queue().ns();
    times.compute_infer_ns += stats.compute_infer().ns();
    times.compute_input_ns += stats.compute_input().ns();
    times.compute_output_ns += stats.compute_output().ns();
    times.success_ns += stats.success().ns();
  }
  return times;
}

}  // namespace chorus::bench
