// bench_serve's load generator: gRPC clients that measure a server's latency
// and throughput, and read its statistics.
#ifndef CHORUS_TESTS_BENCH_SERVE_CLIENT_H_
#define CHORUS_TESTS_BENCH_SERVE_CLIENT_H_

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "chorus/inference/grpc_service.grpc.pb.h"

namespace chorus::bench {

// What Load measured: requests per second and latency quantiles.
struct LoadResult {
  double throughput = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0;
  int64_t requests = 0, errors = 0;
  nlohmann::json Json() const {
    return {{"throughput_per_s", throughput},
            {"p50_us", p50_us},
            {"p90_us", p90_us},
            {"p99_us", p99_us},
            {"requests", requests},
            {"errors", errors}};
  }
};

// A ModelInfer of `model` with one FP32 input "x" of shape [rows, 4].
inference::ModelInferRequest MakeRequest(const std::string& model, int64_t rows);

// p50 latency of ServerLive (no model): gRPC's own floor on this machine;
// `with_deadline`: each call carries a deadline, as the load generator's do.
double GrpcFloorUs(int port, int calls, bool with_deadline = false);

// `clients` threads send `model` requests back to back for `seconds`.
LoadResult Load(int port, const std::string& model, int clients, double seconds);

// The server's own account of the trivial model's requests (cumulative):
// count and nanoseconds queued, in its interpreter call, and in all.
struct ServerTimes {
  double count = 0, queue_ns = 0, compute_infer_ns = 0, success_ns = 0;
  double compute_input_ns = 0, compute_output_ns = 0;  // decoding and encoding
};
ServerTimes TrivialServerTimes(int port);

}  // namespace chorus::bench

#endif  // CHORUS_TESTS_BENCH_SERVE_CLIENT_H_
