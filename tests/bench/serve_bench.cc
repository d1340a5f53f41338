// make bench-serve: a load generator against real chorus-server processes.
//
//   overhead_us_p50         p50 latency of a trivial (identity) model at
//                           concurrency 1 over loopback: the server's own cost
//   grpc_floor_us_p50       p50 of ServerLive, gRPC's own cost (and
//                           grpc_floor_with_deadline_us_p50: each call with a
//                           deadline, as the load generator's calls have)
//   grpc_echo_infer_us_p50  p50 of the same ModelInfer against a gRPC server
//                           that only echoes it (bench_grpc_echo): gRPC and
//                           protobuf's cost for a request of this size;
//                           grpc_echo_handoff_us_p50 the same echoed by a
//                           worker thread woken for each request (one thread
//                           hop), grpc_echo_handoff_spin_us_p50 by a spinning
//                           one; handoff_floor_ratio: the former over the floor
//   overhead_us_p50_perf_analyzer  the same, measured by Triton's perf_analyzer
//                           (its gRPC client and its p50), beside ours
//   sweep                   throughput and p50/p90/p99 latency for the trivial
//                           and a Python-heavy model, concurrency 1..16
//   throughput_ratio_n_vs_1 Python-heavy model, 2 interpreters vs 1, same load
//                           (the load generator shares the 2 cores)
//   soak                    64 clients for --soak-seconds on a batching MLP:
//                           errors and server RSS growth
//   restart_to_ready_s      a SIGSEGV of the supervised serving process until
//                           it is ready and answers again
//   cache_hit_p50_us        p50 of the trivial model's answer from the
//                           response cache (the same request again), concurrency 1
//   chaos                   the chaos run (server/tests/chaos.py, bin/bench_chaos):
//                           requests, lost (0), restarts (2), RSS change
//   in_process_call_overhead_us  p50 of a model answering through one
//                           in-process call (chorus.serving.infer) to the
//                           trivial model, minus the trivial model's p50
//   cells                   the cells run (server/tests/cells.py, bin/bench_cells):
//                           --cells 2 --spare under 8 tritonclient clients while a
//                           poison request kills one cell: refused_during_crash
//                           (beyond each dead-cell client's broken connection),
//                           restart_to_ready_s (death to the spare listening),
//                           footprint_vs_one_cell (PSS of 2 cells over 1)
//   shm_vs_wire_throughput  4 MiB inputs (a model summing their rows) through
//                           system shared memory over the same through the
//                           gRPC wire, concurrency 1, loopback
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>
#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chorus/inference/grpc_service.grpc.pb.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/serve_client.h"
#include "tests/bench/serve_models.h"

namespace chorus::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::string g_bin;  // directory of chorus' binaries

// A chorus-server child process: serving alone, or (supervised) its
// supervisor with the serving process below it.
class ServerProcess {
 public:
  ServerProcess(const std::string& repository, int interpreters, bool supervised = false) {
    const std::string n = std::to_string(interpreters);
    Spawn({g_bin + "/chorus-server", "--model-repository", repository, "--host", "127.0.0.1",
           "--port", "0", "--metrics-port", "-1", "--http-port", "-1", "--interpreters", n,
           "--max-queue", "100000", "--cache-size-bytes", "67108864",
           supervised ? "--strict-readiness" : "--no-supervisor", supervised ? "true" : ""},
          repository + "/../server.log", "chorus-server listening on port %d");
  }
  // bench_grpc_echo: gRPC alone answering ModelInfer (grpc_echo_server.cc),
  // on gRPC's thread or, `handoff` "sleep" or "spin", on a worker thread.
  explicit ServerProcess(const std::string& log, const std::string& handoff = "") {
    Spawn({g_bin + "/bench_grpc_echo", handoff.empty() ? "" : "--handoff", handoff}, log,
          "listening on port %d");
  }
  ~ServerProcess() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    if (stream_ != nullptr) fclose(stream_);
  }
  int port() const { return port_; }
  // The supervised serving process (the supervisor's child), or 0.
  pid_t ServingPid() const {
    std::ifstream children("/proc/" + std::to_string(pid_) + "/task/" + std::to_string(pid_) +
                           "/children");
    pid_t child = 0;
    children >> child;
    return child;
  }
  double ResidentMiB() const { return chorus::ResidentMiB(pid_).value(); }

 private:
  // Runs `argv` (empty arguments left out), its stderr appended to `log`,
  // and reads its port from the first line it prints.
  void Spawn(const std::vector<std::string>& argv, const std::string& log, const char* format) {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      std::freopen(log.c_str(), "a", stderr);
      std::vector<char*> args;
      for (const std::string& arg : argv) {
        if (!arg.empty()) args.push_back(const_cast<char*>(arg.c_str()));
      }
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out[1]);
    FILE* stream = fdopen(out[0], "r");
    char line[512] = {0};
    if (!fgets(line, sizeof(line), stream) || sscanf(line, format, &port_) != 1) {
      throw std::runtime_error(argv[0] + " did not start");
    }
    stream_ = stream;  // kept open: a restarted serving process prints its line again
  }

  pid_t pid_ = -1;
  int port_ = 0;
  FILE* stream_ = nullptr;
};

// Seconds from a SIGSEGV of the supervised serving process until the server is
// ready again and answers `model` (the supervisor's restart, model loads).
double RestartToReadySeconds(const ServerProcess& server, const std::string& model) {
  const pid_t crashed = server.ServingPid();
  if (crashed <= 0) throw std::runtime_error("no supervised serving process");
  const Clock::time_point start = Clock::now();
  kill(crashed, SIGSEGV);
  while (Clock::now() - start < std::chrono::seconds(120)) {
    const pid_t serving = server.ServingPid();
    if (serving > 0 && serving != crashed) {
      // A new channel each time: a channel that saw the crash waits out its
      // reconnect backoff (seconds), which is the client's delay, not the server's.
      auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
          "127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials()));
      grpc::ClientContext ready_context, infer_context;
      ready_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
      infer_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      inference::ServerReadyResponse ready;
      inference::ModelInferResponse answer;
      if (stub->ServerReady(&ready_context, {}, &ready).ok() && ready.ready() &&
          stub->ModelInfer(&infer_context, MakeRequest(model, 1), &answer).ok()) {
        return std::chrono::duration<double>(Clock::now() - start).count();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error("the server was not ready 120 s after its serving process crashed");
}

// perf_analyzer's p50 latency (us) for `model` at concurrency 1, from its CSV
// report; -1 when it is not installed or fails (the reason is printed).
double PerfAnalyzerP50Us(int port, const std::string& model, const std::string& scratch) {
  const std::string binary = CHORUS_PERF_ANALYZER;
  if (binary.empty() || access(binary.c_str(), X_OK) != 0) {
    std::printf("perf_analyzer not installed (make configure installs it)\n");
    return -1;
  }
  const std::string csv = scratch + "/perf_analyzer.csv";
  const std::string command =
      binary + " -m " + model + " -i grpc -u 127.0.0.1:" + std::to_string(port) +
      " -p 2000 --concurrency-range 1 -f " + csv + " > " + scratch + "/perf_analyzer.log 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::printf("perf_analyzer failed: see %s/perf_analyzer.log\n", scratch.c_str());
    return -1;
  }
  std::ifstream file(csv);
  std::string header, row;
  std::getline(file, header);
  std::getline(file, row);
  auto split = [](const std::string& line) {
    std::vector<std::string> cells;
    std::stringstream stream(line);
    for (std::string cell; std::getline(stream, cell, ',');) cells.push_back(cell);
    return cells;
  };
  const std::vector<std::string> names = split(header), values = split(row);
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (names[i] == "p50 latency") return std::stod(values[i]);
  }
  return -1;
}

struct Options {
  std::string out = "build/bench/serve.json";
  std::string data = "build/bench-data/serve";
  double seconds = 3;
  double soak_seconds = 60;
  double chaos_seconds = 90;
  int rounds = 3;
};

// A model whose one in-process call (chorus.serving.infer) reaches the trivial
// model, against the trivial model called directly, in interleaved rounds.
nlohmann::json MeasureInProcessCall(int port, const Options& options) {
  Load(port, "calls_trivial", 1, 0.5);
  std::vector<double> p50s = InterleavedMedians(
      options.rounds, {[&] { return Load(port, "calls_trivial", 1, options.seconds).p50_us; },
                       [&] { return Load(port, "trivial", 1, options.seconds).p50_us; }});
  std::printf("one in-process model call: p50 %.0f us through it, %.0f us direct (+%.0f us)\n",
              p50s[0], p50s[1], p50s[0] - p50s[1]);
  return {{"in_process_call_overhead_us", p50s[0] - p50s[1]},
          {"in_process_call", {{"through_call_p50_us", p50s[0]}, {"direct_p50_us", p50s[1]}}}};
}

// A number of `result`.
double Figure(const nlohmann::json& result, const char* key) { return result[key].get<double>(); }

// The server's mean times (us) per request between two readings of its statistics.
nlohmann::json MeanServerTimesUs(const ServerTimes& before, const ServerTimes& after) {
  const double requests = std::max(1.0, after.count - before.count);
  auto mean = [&](double ServerTimes::*field) {
    return (after.*field - before.*field) / requests / 1000;
  };
  return {{"queue", mean(&ServerTimes::queue_ns)},
          {"compute_input", mean(&ServerTimes::compute_input_ns)},
          {"compute_infer", mean(&ServerTimes::compute_infer_ns)},
          {"compute_output", mean(&ServerTimes::compute_output_ns)},
          {"total", mean(&ServerTimes::success_ns)}};
}

// The request path at concurrency 1, in interleaved rounds (medians), so that
// the ratios compare figures of the same moments: gRPC's floor (ServerLive on
// chorus), chorus' trivial model, its response cache hit, and gRPC servers
// that only echo ModelInfer: on gRPC's thread, and on a worker thread woken
// for each request (one thread hop, as any server with a request queue makes).
// Then the echo on a spinning worker (alone: it keeps a core busy).
// overhead_floor_ratio and handoff_floor_ratio are the median over rounds of
// chorus' and the woken worker echo's p50 over the same round's floor: the
// latter is the least overhead ratio a server handing requests to another
// thread reaches on this machine.
nlohmann::json MeasureRequestPath(int chorus_port, const Options& options) {
  nlohmann::json result;
  {
    ServerProcess echo(options.data + "/echo.log");
    ServerProcess handoff(options.data + "/echo_handoff.log", "sleep");
    auto p50 = [&](int port, const char* model) {
      return Load(port, model, 1, options.seconds).p50_us;
    };
    Load(chorus_port, "trivial_cached", 1, 0.5);
    Load(echo.port(), "trivial", 1, 0.5);
    Load(handoff.port(), "trivial", 1, 0.5);
    const ServerTimes before = TrivialServerTimes(chorus_port);
    const char* names[] = {"grpc_floor_us_p50", "overhead_us_p50", "cache_hit_p50_us",
                           "grpc_echo_infer_us_p50", "grpc_echo_handoff_us_p50"};
    std::vector<std::vector<double>> rounds =
        InterleavedSamples(options.rounds, {[&] { return GrpcFloorUs(chorus_port, 3000); },
                                            [&] { return p50(chorus_port, "trivial"); },
                                            [&] { return p50(chorus_port, "trivial_cached"); },
                                            [&] { return p50(echo.port(), "trivial"); },
                                            [&] { return p50(handoff.port(), "trivial"); }});
    for (size_t m = 0; m < rounds.size(); ++m) {
      result[names[m]] = Median(rounds[m]);
      result["request_path_rounds"][names[m]] = rounds[m];
    }
    // Ratios to the floor of the same round, then their median.
    std::vector<double> overhead_ratios, handoff_ratios;
    for (size_t r = 0; r < rounds[0].size(); ++r) {
      overhead_ratios.push_back(rounds[1][r] / rounds[0][r]);
      handoff_ratios.push_back(rounds[4][r] / rounds[0][r]);
    }
    result["overhead_floor_ratio"] = Median(overhead_ratios);
    result["handoff_floor_ratio"] = Median(handoff_ratios);
    // Means from the server's statistics over the same requests (chorus' trivial model).
    result["trivial_in_server_us"] = MeanServerTimesUs(before, TrivialServerTimes(chorus_port));
    // The least a one-hop server that also calls the model once can take, over the floor.
    result["handoff_and_model_call_floor_ratio"] =
        (Median(rounds[4]) + result["trivial_in_server_us"]["compute_infer"].get<double>()) /
        Median(rounds[0]);
  }
  {
    ServerProcess spin(options.data + "/echo_spin.log", "spin");
    Load(spin.port(), "trivial", 1, 0.5);
    result["grpc_echo_handoff_spin_us_p50"] =
        Load(spin.port(), "trivial", 1, options.seconds).p50_us;
  }
  std::printf(
      "concurrency 1, p50: gRPC's floor %.0f us; chorus' trivial model %.0f us (%.2fx), a "
      "response cache hit %.0f us; gRPC echoing ModelInfer %.0f us, echoing it from a woken "
      "worker thread %.0f us (%.2fx the floor), from a spinning one %.0f us\n",
      Figure(result, "grpc_floor_us_p50"), Figure(result, "overhead_us_p50"),
      Figure(result, "overhead_floor_ratio"), Figure(result, "cache_hit_p50_us"),
      Figure(result, "grpc_echo_infer_us_p50"), Figure(result, "grpc_echo_handoff_us_p50"),
      Figure(result, "handoff_floor_ratio"), Figure(result, "grpc_echo_handoff_spin_us_p50"));
  return result;
}

// The trivial model at concurrency 1 (ours, gRPC alone and perf_analyzer's), then
// the trivial and the Python-heavy model at concurrency 1..16, on 2 interpreters.
nlohmann::json MeasureOverheadAndSweep(const std::string& repository, const Options& options) {
  nlohmann::json result;
  ServerProcess two(repository, 2);
  Load(two.port(), "trivial", 1, 0.5);  // warm-up
  result.update(MeasureRequestPath(two.port(), options));
  result["grpc_floor_with_deadline_us_p50"] = GrpcFloorUs(two.port(), 3000, true);
  result.update(MeasureInProcessCall(two.port(), options));
  const double perf_analyzer_p50 = PerfAnalyzerP50Us(two.port(), "trivial", options.data);
  result["overhead_us_p50_perf_analyzer"] =
      perf_analyzer_p50 < 0 ? nlohmann::json() : nlohmann::json(perf_analyzer_p50);
  std::printf("trivial model, concurrency 1, perf_analyzer: p50 %.0f us\n", perf_analyzer_p50);
  std::printf("%-8s %6s %12s %9s %9s %9s\n", "model", "conc", "requests/s", "p50 us", "p90 us",
              "p99 us");
  for (const char* model : {"trivial", "heavy"}) {
    for (int concurrency : {1, 2, 4, 8, 16}) {
      LoadResult r = Load(two.port(), model, concurrency, std::max(1.0, options.seconds / 2));
      result["sweep"][model][std::to_string(concurrency)] = r.Json();
      std::printf("%-8s %6d %12.1f %9.0f %9.0f %9.0f\n", model, concurrency, r.throughput, r.p50_us,
                  r.p90_us, r.p99_us);
    }
  }
  return result;
}

// The Python-heavy model under the same load on 1 interpreter and on 2, in
// interleaved rounds.
nlohmann::json MeasureInterpreterScaling(const std::string& repository, const Options& options) {
  nlohmann::json result;
  ServerProcess one(repository, 1), two(repository, 2);
  Load(one.port(), "heavy", 4, 0.5);
  Load(two.port(), "heavy", 4, 0.5);
  std::vector<double> medians = InterleavedMedians(
      options.rounds, {[&] { return Load(one.port(), "heavy", 4, options.seconds).throughput; },
                       [&] { return Load(two.port(), "heavy", 4, options.seconds).throughput; }});
  result["heavy_throughput_per_s"] = {{"interpreters_1", medians[0]},
                                      {"interpreters_2", medians[1]}};
  result["throughput_ratio_n_vs_1"] = medians[1] / medians[0];
  std::printf("Python-heavy model: %.1f req/s with 1 interpreter, %.1f with 2 (%.2fx)\n",
              medians[0], medians[1], medians[1] / medians[0]);
  return result;
}

// 64 clients on the batching MLP for --soak-seconds: errors and RSS growth.
nlohmann::json MeasureSoak(const std::string& repository, double soak_seconds) {
  ServerProcess server(repository, 2);
  Load(server.port(), "mlp", 64, 5);  // warm-up: allocator and caches settle
  const double rss_start = server.ResidentMiB();
  LoadResult soak = Load(server.port(), "mlp", 64, soak_seconds);
  const double rss_end = server.ResidentMiB();
  std::printf("soak: 64 clients, %.0f s, %lld requests, %lld errors, RSS %.1f -> %.1f MiB\n\n",
              soak_seconds, static_cast<long long>(soak.requests),
              static_cast<long long>(soak.errors), rss_start, rss_end);
  return {{"clients", 64},
          {"seconds", soak_seconds},
          {"errors", soak.errors},
          {"requests", soak.requests},
          {"throughput_per_s", soak.throughput},
          {"p99_us", soak.p99_us},
          {"rss_start_mib", rss_start},
          {"rss_end_mib", rss_end},
          {"rss_growth_pct", 100.0 * (rss_end - rss_start) / rss_start}};
}

// Crash to ready again: the supervisor restarts the serving process, which
// loads the repository; each round's pause doubles (250 ms, 500 ms, ...),
// so the first round is what a lone crash costs.
nlohmann::json MeasureRestart(const std::string& repository) {
  nlohmann::json result;
  ServerProcess supervised(repository, 2, /*supervised=*/true);
  Load(supervised.port(), "mlp", 1, 0.5);
  std::vector<double> rounds_s;
  for (int round = 0; round < 3; ++round) {
    rounds_s.push_back(RestartToReadySeconds(supervised, "mlp"));
  }
  result["restart_to_ready_s"] = rounds_s[0];
  result["restart_to_ready_s_rounds"] = rounds_s;
  std::printf(
      "crash to ready again (supervised, 2 interpreters): %.2f s (rounds: %.2f, %.2f, "
      "%.2f s; the supervisor's pause doubles each time)\n\n",
      rounds_s[0], rounds_s[0], rounds_s[1], rounds_s[2]);
  return result;
}

// The figures of a run of bin/`script` (a Python run that writes JSON), or
// nothing when it failed.
std::optional<nlohmann::json> RunScript(const std::string& script, const std::string& args,
                                        const Options& options) {
  const std::string figures = options.data + "/" + script + ".json";
  const std::string command =
      g_bin + "/" + script + " --out '" + figures + "' " + args + " > /dev/null";
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "bench_serve: %s failed (%s)\n", script.c_str(), command.c_str());
    return std::nullopt;
  }
  std::ifstream in(figures);
  return nlohmann::json::parse(in);
}

// The cells run's figures (bin/bench_cells), or nothing when it failed.
std::optional<nlohmann::json> RunCells(const Options& options) {
  std::optional<nlohmann::json> cells = RunScript("bench_cells", "", options);
  if (!cells) return std::nullopt;
  std::printf(
      "cells (2, a spare, %d clients): %lld requests, %lld refused during the crash (%lld "
      "broken connections of the dead cell), spare listening %.3f s after the death, "
      "footprint %.2fx one cell (%.2fx with the spare)\n\n",
      (*cells)["clients"].get<int>(), (*cells)["requests"].get<long long>(),
      (*cells)["refused_during_crash"].get<long long>(),
      (*cells)["dead_cell_connections_broken"].get<long long>(),
      (*cells)["restart_to_ready_s"].get<double>(), (*cells)["footprint_vs_one_cell"].get<double>(),
      (*cells)["footprint_with_spare_vs_one_cell"].get<double>());
  return cells;
}

// The chaos run's figures (bin/bench_chaos), or nothing when it failed.
std::optional<nlohmann::json> RunChaos(const Options& options) {
  std::optional<nlohmann::json> chaos =
      RunScript("bench_chaos", "--seconds " + std::to_string(options.chaos_seconds), options);
  if (!chaos) return std::nullopt;
  std::printf("chaos (%d clients, %.0f s): %lld requests, %lld lost, %d restarts, RSS %+.2f%%\n\n",
              (*chaos)["clients"].get<int>(), (*chaos)["seconds"].get<double>(),
              (*chaos)["requests"].get<long long>(), (*chaos)["lost"].get<long long>(),
              (*chaos)["restarts"].get<int>(), (*chaos)["rss_change_pct"].get<double>());
  return chaos;
}

// Requests per second of `request` sent back to back for `seconds` (each must succeed).
double Rate(inference::GRPCInferenceService::Stub& stub,
            const inference::ModelInferRequest& request, double seconds) {
  const Clock::time_point start = Clock::now();
  int64_t calls = 0;
  inference::ModelInferResponse response;
  while (SecondsSince(start) < seconds) {
    grpc::ClientContext context;
    grpc::Status status = stub.ModelInfer(&context, request, &response);
    if (!status.ok()) throw std::runtime_error("row_sums: " + status.error_message());
    ++calls;
  }
  return calls / SecondsSince(start);
}

// 4 MiB inputs through the gRPC wire and through a registered system shared
// memory region (written once, as a client that fills it in place would).
nlohmann::json MeasureSharedMemory(const std::string& repository, const Options& options) {
  ServerProcess server(repository, 2);
  constexpr int64_t kSide = 1024;
  const size_t bytes = kSide * kSide * sizeof(float);
  const std::string key = "/chorus_bench_" + std::to_string(getpid());
  const int fd = shm_open(key.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) throw std::runtime_error("shm");
  auto* values =
      static_cast<float*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  for (int64_t i = 0; i < kSide * kSide; ++i) values[i] = 0.25f * (i % 7);
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    inference::SystemSharedMemoryRegisterRequest region;
    inference::SystemSharedMemoryRegisterResponse registered;
    region.set_name("input");
    region.set_key(key);
    region.set_byte_size(bytes);
    if (!stub->SystemSharedMemoryRegister(&context, region, &registered).ok()) {
      throw std::runtime_error("could not register the shared memory region");
    }
  }
  inference::ModelInferRequest wire;
  wire.set_model_name("row_sums");
  auto* input = wire.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  input->add_shape(kSide);
  input->add_shape(kSide);
  inference::ModelInferRequest in_memory = wire;
  wire.add_raw_input_contents(reinterpret_cast<const char*>(values), bytes);
  auto& parameters = *in_memory.mutable_inputs(0)->mutable_parameters();
  parameters["shared_memory_region"].set_string_param("input");
  parameters["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(bytes));
  Rate(*stub, wire, 0.5);
  Rate(*stub, in_memory, 0.5);
  std::vector<double> medians =
      InterleavedMedians(options.rounds, {[&] { return Rate(*stub, wire, options.seconds); },
                                          [&] { return Rate(*stub, in_memory, options.seconds); }});
  munmap(values, bytes);
  shm_unlink(key.c_str());
  std::printf(
      "4 MiB inputs: %.1f req/s through the gRPC wire, %.1f through shared memory (%.2fx)\n\n",
      medians[0], medians[1], medians[1] / medians[0]);
  return {{"shm_vs_wire_throughput", medians[1] / medians[0]},
          {"shared_memory_4mib", {{"wire_per_s", medians[0]}, {"shm_per_s", medians[1]}}}};
}

}  // namespace
}  // namespace chorus::bench

int main(int argc, char** argv) {
  using namespace chorus::bench;
  CLI::App app{"chorus serving benchmark (a load generator against chorus-server)"};
  Options options;
  AddCommonOptions(app, &options.out, &options.rounds);
  app.add_option("--data", options.data, "scratch directory for the model repository");
  app.add_option("--seconds", options.seconds, "seconds per measured load");
  app.add_option("--soak-seconds", options.soak_seconds, "soak duration (>= 60 for the report)");
  app.add_option("--chaos-seconds", options.chaos_seconds, "duration of the chaos run");
  bool request_path_only = false;
  app.add_flag("--request-path-only", request_path_only,
               "measure only the request paths at concurrency 1 (floor, echoes, chorus, cache "
               "hit, one in-process model call)");
  CLI11_PARSE(app, argc, argv);
  char self[4096] = {0};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return 1;
  g_bin = std::string(self).substr(0, std::string(self).rfind('/'));
  const std::string repository = MakeRepository(options.data, g_bin);

  if (request_path_only) {
    ServerProcess two(repository, 2);
    Load(two.port(), "trivial", 1, 0.5);  // warm-up
    nlohmann::json result = MeasureRequestPath(two.port(), options);
    result.update(MeasureInProcessCall(two.port(), options));
    return WriteJson(options.out, result) ? 0 : 1;
  }
  nlohmann::json result = MeasureOverheadAndSweep(repository, options);
  result.update(MeasureInterpreterScaling(repository, options));
  result.update(MeasureSharedMemory(repository, options));
  result["soak"] = MeasureSoak(repository, options.soak_seconds);
  result.update(MeasureRestart(repository));
  std::optional<nlohmann::json> cells = RunCells(options);
  if (!cells) return 1;
  result["cells"] = *cells;
  std::optional<nlohmann::json> chaos = RunChaos(options);
  if (!chaos) return 1;
  result["chaos"] = *chaos;
  return WriteJson(options.out, result) ? 0 : 1;
}
