// make bench-dist: the in-process transport against memcpy, and an FSDP
// training step against a single-rank one.
//
// allreduce_gbps_vs_memcpy.<size>: bus bandwidth of an in-process all-reduce
// on 2 ranks (bytes / time per all-reduce) over single-thread memcpy
// bandwidth for the same bytes, measured in interleaved rounds.
// fsdp2_step_over_single_rank: median step time of the Llama 3 debug model
// trained with FSDP on 2 ranks (2 interpreters) over one rank training on the
// same global batch; intra-op threads fixed at 1 per rank.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/ivalue.h>

#include <CLI/CLI.hpp>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/training/collectives/bindings.h"
#include "chorus/training/collectives/communicator.h"
#include "chorus/training/collectives/hierarchical.h"
#include "tests/bench/bench_util.h"

namespace chorus::bench {
namespace {

double MemcpyGbps(size_t bytes, int iterations) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), bytes);
  }
  return bytes * iterations / SecondsSince(start) / 1e9;
}

double AllReduceGbps(size_t bytes, int iterations) {
  const int ranks = 2;
  auto group = InProcessGroup::Create(ranks);
  std::vector<at::Tensor> tensors;
  for (int r = 0; r < ranks; ++r) tensors.push_back(at::ones({static_cast<int64_t>(bytes / 4)}));
  std::vector<double> seconds(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group->Rank(r);
      comm->Barrier().CheckOk();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) comm->AllReduce(tensors[r], ReduceOp::kSum).CheckOk();
      seconds[r] = SecondsSince(start);
    });
  }
  for (auto& t : threads) t.join();
  return bytes * iterations / std::max(seconds[0], seconds[1]) / 1e9;
}

nlohmann::json MeasureAllReduce(int rounds) {
  nlohmann::json result;
  for (const auto& [name, size] : {std::pair<const char*, size_t>{"1MB", 1 << 20},
                                   {"16MB", 16 << 20},
                                   {"256MB", 256u << 20}}) {
    const size_t bytes = size;  // A plain variable: lambdas may not capture bindings (C++17).
    const int iterations = std::max(3, static_cast<int>((512u << 20) / bytes));
    std::vector<double> medians =
        InterleavedMedians(rounds, {[&] { return MemcpyGbps(bytes, iterations); },
                                    [&] { return AllReduceGbps(bytes, iterations); }});
    result["memcpy_gbps"][name] = medians[0];
    result["allreduce_gbps"][name] = medians[1];
    result["allreduce_gbps_vs_memcpy"][name] = medians[1] / medians[0];
  }
  return result;
}

// One rank's communicators: data parallel, and for HSDP the groups that shard
// and that replicate the parameters (null: plain FSDP over `dp`).
struct RankComms {
  std::shared_ptr<Communicator> dp, shard, replicate;
};

double StepSeconds(InterpreterManager& manager, const std::vector<RankComms>& comms, int steps) {
  const int dp = static_cast<int>(comms.size());
  std::vector<double> step_medians(dp);
  std::vector<std::thread> ranks;
  for (int r = 0; r < dp; ++r) {
    ranks.emplace_back([&, r] {
      c10::Dict<std::string, int64_t> config;
      config.insert("steps", steps);
      config.insert("n_kv_heads", 4);
      InterpreterSession session = manager.Acquire(r);
      auto run = session.Global("train", "run_rank");
      auto out = run.ok() ? run->Call({CommunicatorToIValue(comms[r].dp), c10::IValue(), config,
                                       std::string(), CommunicatorToIValue(comms[r].shard),
                                       CommunicatorToIValue(comms[r].replicate)})
                          : run;
      auto value = out.ok() ? out->ToIValue() : out.status();
      if (!value.ok()) {
        std::cerr << value.status().ToString() << "\n";
        std::exit(1);
      }
      std::vector<double> times;
      auto list = value->toGenericDict().at("step_s").toListRef();
      for (size_t i = 1; i < list.size(); ++i) times.push_back(list[i].toDouble());
      step_medians[r] = Median(times);
    });
  }
  for (auto& t : ranks) t.join();
  return *std::max_element(step_medians.begin(), step_medians.end());
}

// Median step time (steps after the first) of the Llama 3 debug model on
// `dp` ranks (interpreters 0..dp-1).
double StepSeconds(InterpreterManager& manager, int dp, int steps) {
  auto group = InProcessGroup::Create(dp);
  std::vector<RankComms> comms;
  for (int r = 0; r < dp; ++r) comms.push_back({dp > 1 ? group->Rank(r) : nullptr});
  return StepSeconds(manager, comms, steps);
}

// 2 hosts x 2 interpreters, the hosts simulated in this process (an
// in-process group each, Gloo over loopback between), FSDP over all four and
// HSDP (shard inside a host, replicate across), against 1 host x 2
// interpreters with the same global batch. On one 2-core machine this
// measures the hierarchy's overhead, not a speed-up.
nlohmann::json MeasureMultiHost(InterpreterManager& manager, int rounds, int steps) {
  auto fsdp = CreateSimulatedHosts(2, 2);
  auto hsdp = CreateSimulatedHosts(2, 2);
  if (!fsdp.ok() || !hsdp.ok()) {
    std::cerr << (fsdp.ok() ? hsdp.status() : fsdp.status()).ToString() << "\n";
    std::exit(1);
  }
  std::vector<RankComms> fsdp_comms, hsdp_comms;
  for (const auto& rank : *fsdp) fsdp_comms.push_back({rank});
  for (const auto& rank : *hsdp) hsdp_comms.push_back({rank, rank->local(), rank->cross()});
  std::vector<double> step =
      InterleavedMedians(rounds, {[&] { return StepSeconds(manager, 2, steps); },
                                  [&] { return StepSeconds(manager, fsdp_comms, steps); },
                                  [&] { return StepSeconds(manager, hsdp_comms, steps); }});
  // Bytes per step: one more run of each, counted.
  auto per_step_mib = [&](const std::vector<std::shared_ptr<HierarchicalCommunicator>>& ranks,
                          const std::vector<RankComms>& comms) {
    const int64_t before = ranks[0]->cross_host_bytes();
    StepSeconds(manager, comms, steps);
    return static_cast<double>(ranks[0]->cross_host_bytes() - before) / steps / (1 << 20);
  };
  nlohmann::json out;
  out["simulated_hosts"] = true;
  out["hosts"] = 2;
  out["interpreters_per_host"] = 2;
  out["step_s"] = {{"one_host_x2", step[0]}, {"fsdp_2x2", step[1]}, {"hsdp_2x2", step[2]}};
  // The keys hold FSDP across all four ranks; by_layout adds HSDP.
  const double fsdp_mib = per_step_mib(*fsdp, fsdp_comms);
  const double hsdp_mib = per_step_mib(*hsdp, hsdp_comms);
  out["tokens_per_s_vs_one_host"] = step[0] / step[1];
  out["cross_host_mib_per_step"] = fsdp_mib;
  out["by_layout"] = {
      {"fsdp",
       {{"tokens_per_s_vs_one_host", step[0] / step[1]}, {"cross_host_mib_per_step", fsdp_mib}}},
      {"hsdp",
       {{"tokens_per_s_vs_one_host", step[0] / step[2]}, {"cross_host_mib_per_step", hsdp_mib}}}};
  return out;
}

}  // namespace
}  // namespace chorus::bench

int main(int argc, char** argv) {
  using namespace chorus;
  using namespace chorus::bench;
  CLI::App app{"chorus distributed benchmark"};
  std::string out = "build/bench/dist.json", cache = "build/bench-cache";
  int rounds = 5, steps = 6;
  AddCommonOptions(app, &out, &rounds, &cache);
  app.add_option("--steps", steps, "training steps per FSDP/single run");
  CLI11_PARSE(app, argc, argv);

  nlohmann::json result = MeasureAllReduce(rounds);

  InterpreterManagerOptions options;
  options.num_interpreters = 4;
  options.cache_dir = cache;
  options.intra_op_threads = 1;
  auto manager = InterpreterManager::Create(options);
  if (!manager.ok()) {
    std::cerr << manager.status().ToString() << "\n";
    return 1;
  }
  for (int i = 0; i < 4; ++i) {
    InterpreterSession session = (*manager)->Acquire(i);
    session
        .Exec(std::string("import sys\nsys.path.insert(0, '") + CHORUS_SOURCE_DIR +
              "/examples/llama3')\nimport train")
        .CheckOk();
  }
  std::vector<double> step = InterleavedMedians(std::max(1, rounds / 2),
                                                {[&] { return StepSeconds(**manager, 1, steps); },
                                                 [&] { return StepSeconds(**manager, 2, steps); }});
  result["step_s"] = {{"single_rank", step[0]}, {"fsdp2", step[1]}};
  result["fsdp2_step_over_single_rank"] = step[1] / step[0];
  result["intra_op_threads_per_rank"] = 1;
  result["multi_host"] = MeasureMultiHost(**manager, std::max(1, rounds / 2), steps);

  std::printf("\nin-process all-reduce, 2 ranks (bus GB/s vs one-thread memcpy GB/s)\n");
  for (const char* size : {"1MB", "16MB", "256MB"}) {
    std::printf("  %-6s %7.2f GB/s vs %7.2f GB/s = %.2fx\n", size,
                result["allreduce_gbps"][size].get<double>(),
                result["memcpy_gbps"][size].get<double>(),
                result["allreduce_gbps_vs_memcpy"][size].get<double>());
  }
  std::printf("Llama 3 debug step: one rank %.3f s, FSDP on 2 ranks %.3f s (%.2fx)\n", step[0],
              step[1], step[1] / step[0]);
  const nlohmann::json& multi = result["multi_host"];
  std::printf(
      "2 simulated hosts x 2 vs 1 host x 2 (tokens/s): FSDP %.2fx, HSDP %.2fx; "
      "cross-host MiB/step per rank: FSDP %.1f, HSDP %.1f\n\n",
      multi["by_layout"]["fsdp"]["tokens_per_s_vs_one_host"].get<double>(),
      multi["by_layout"]["hsdp"]["tokens_per_s_vs_one_host"].get<double>(),
      multi["by_layout"]["fsdp"]["cross_host_mib_per_step"].get<double>(),
      multi["by_layout"]["hsdp"]["cross_host_mib_per_step"].get<double>());
  return WriteJson(out, result) ? 0 : 1;
}
