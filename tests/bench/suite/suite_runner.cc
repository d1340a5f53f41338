// Runs one benchmark cell in chorus or on TorchScript, as python_runner.py
// does for the Python modes, and prints the same JSON object.
//
//   bench_suite_runner --model M.pt --inputs M.inputs.pt --workers N
//                      [--warmup-s 1] [--measure-s 3] [--launched-at EPOCH]
//
// A torch.package archive runs in chorus with N interpreters; a TorchScript
// archive runs on libtorch alone. Either way N threads call the model through
// chorus::Model (one intra-op thread each) on the inputs in --inputs: a
// TorchScript module whose attribute `inputs` lists the model's example
// inputs (libtorch's unpickler cannot read every torch.save file).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/ivalue.h>
#include <torch/script.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/package/archive.h"
#include "chorus/package/model.h"
#include "tests/bench/bench_util.h"

namespace chorus::bench {
namespace {

using Clock = std::chrono::steady_clock;

double EpochSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

StatusOr<std::vector<c10::IValue>> ExampleInputs(const std::string& path) {
  try {
    torch::jit::Module holder = torch::jit::load(path);
    std::vector<c10::IValue> inputs;
    for (const c10::IValue& input : holder.attr("inputs").toListRef()) inputs.push_back(input);
    return inputs;
  } catch (const c10::Error& e) {
    return InvalidArgumentError("cannot read inputs from " + path + ": " +
                                e.what_without_backtrace());
  }
}

struct Options {
  std::string model, inputs;
  int workers = 1;
  double warmup_s = 1, measure_s = 3, launched_at = 0;
};

// The manager is created only for the formats that run Python; it must
// outlive the model.
StatusOr<std::shared_ptr<Model>> LoadModel(const Options& options,
                                           std::unique_ptr<InterpreterManager>* manager) {
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Archive> probe, Archive::Open(options.model));
  if (FormatInfo(probe->format()).runs_on_interpreters) {
    InterpreterManagerOptions manager_options;
    manager_options.num_interpreters = options.workers;
    manager_options.intra_op_threads = 1;
    CHORUS_ASSIGN_OR_RETURN(*manager, InterpreterManager::Create(manager_options));
  }
  ModelOptions model_options;
  model_options.concurrent_runs = static_cast<size_t>(options.workers);  // AOTInductor
  return Model::Load(manager->get(), options.model, model_options);
}

Clock::duration Seconds(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

struct Measured {
  std::vector<double> latencies;  // seconds, every measured call of every worker
  double ready_s = 0;             // launch until every worker had a first result
  double seconds = 0;             // the measured window
  int failures = 0;
};

// N threads call the model: each a first call, warm-up, then (all together)
// the measured window.
Measured Measure(Model& model, const std::vector<c10::IValue>& inputs, const Options& options) {
  std::atomic<int> warmed{0}, failures{0};
  std::atomic<bool> go{false};
  Clock::time_point end;
  std::vector<double> first_result(options.workers);
  std::vector<std::vector<double>> latencies(options.workers);
  auto call = [&] {
    if (!model.Forward(inputs).ok()) ++failures;
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < options.workers; ++w) {
    threads.emplace_back([&, w] {
      at::set_num_threads(1);
      call();
      first_result[w] = EpochSeconds();
      const Clock::time_point warm_until = Clock::now() + Seconds(options.warmup_s);
      while (Clock::now() < warm_until) call();
      ++warmed;
      while (!go.load()) std::this_thread::yield();
      while (Clock::now() < end) {
        const Clock::time_point start = Clock::now();
        call();
        latencies[w].push_back(SecondsSince(start));
      }
    });
  }
  while (warmed.load() < options.workers) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Measured measured;
  measured.ready_s =
      *std::max_element(first_result.begin(), first_result.end()) - options.launched_at;
  const Clock::time_point start = Clock::now();
  end = start + Seconds(options.measure_s);
  go.store(true);
  for (std::thread& thread : threads) thread.join();
  measured.seconds = SecondsSince(start);
  measured.failures = failures.load();
  for (const auto& l : latencies) {
    measured.latencies.insert(measured.latencies.end(), l.begin(), l.end());
  }
  return measured;
}

// The same JSON object python_runner.py prints.
nlohmann::json Summary(Measured measured, int64_t batch) {
  std::vector<double>& all = measured.latencies;
  std::sort(all.begin(), all.end());
  auto percentile = [&](double q) {
    return all.empty() ? 0.0 : all[std::min(all.size() - 1, static_cast<size_t>(q * all.size()))];
  };
  return {{"items_per_s", static_cast<double>(all.size() * batch) / measured.seconds},
          {"calls", all.size()},
          {"p50_ms", percentile(0.5) * 1e3},
          {"p99_ms", percentile(0.99) * 1e3},
          {"rss_mib", ResidentMiB().value()},
          {"footprint_mib", ResidentMiB().value()},  // one process: its pages, each once
          {"first_result_s", measured.ready_s}};
}

int Run(const Options& options) {
  at::set_num_threads(1);
  std::unique_ptr<InterpreterManager> manager;
  StatusOr<std::shared_ptr<Model>> model = LoadModel(options, &manager);
  StatusOr<std::vector<c10::IValue>> inputs = ExampleInputs(options.inputs);
  if (!model.ok() || !inputs.ok()) {
    std::cerr << (model.ok() ? inputs.status() : model.status()).ToString() << "\n";
    return 1;
  }
  const at::Tensor& first = inputs->front().toTensor();
  const int64_t batch = first.dim() ? first.size(0) : 1;
  Measured measured = Measure(**model, *inputs, options);
  if (measured.failures > 0) {
    std::cerr << measured.failures << " calls failed\n";
    return 1;
  }
  std::cout << Summary(std::move(measured), batch).dump() << std::endl;
  return 0;
}

}  // namespace
}  // namespace chorus::bench

int main(int argc, char** argv) {
  chorus::bench::Options options;
  CLI::App app{"Runs one benchmark suite cell in chorus or TorchScript"};
  app.add_option("--model", options.model, "chorus archive or TorchScript file")->required();
  app.add_option("--inputs", options.inputs, "TorchScript module holding `inputs`")->required();
  app.add_option("--workers", options.workers, "threads (and interpreters)");
  app.add_option("--warmup-s", options.warmup_s);
  app.add_option("--measure-s", options.measure_s);
  app.add_option("--launched-at", options.launched_at, "epoch seconds the process was started");
  CLI11_PARSE(app, argc, argv);
  if (options.launched_at == 0) options.launched_at = chorus::bench::EpochSeconds();
  return chorus::bench::Run(options);
}
