// make bench-interpreter: what N interpreters in one process buy.
//
// Workloads, each run three ways side by side in interleaved rounds:
//   one interpreter on one thread (the base);
//   N interpreters, each on its own thread (chorus);
//   one interpreter shared by N threads (plain embedded Python: the GIL).
// pure_python is a CPU-bound Python loop; small_torch a batch-1 4-layer MLP
// forward; compiled_model the same MLP under torch.compile (inductor, its C++
// kernels built once per interpreter before measuring; torch 2.x only).
// Intra-op threads are fixed at 1, so the only parallelism is ours.
// Start-up time and memory are measured in child processes (this binary with
// --startup-child), one interpreter against N.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/ivalue.h>

#include <unistd.h>
#include <CLI/CLI.hpp>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chorus/interpreter/gpu_host.h"
#include "chorus/interpreter/interpreter_manager.h"
#include "tests/bench/bench_util.h"

namespace chorus::bench {
namespace {

struct Workload {
  std::string name;
  std::string setup;     // run once in every interpreter
  std::string function;  // the callable each call invokes
  std::vector<c10::IValue> args;
};

const char kPurePythonSetup[] = R"(
def pure_python(n):
    total = 0
    for i in range(n):
        total += (i * i) % 7
    return total
)";

const char kSmallTorchSetup[] = R"(
import torch
torch.manual_seed(0)
_mlp = torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.ReLU(),
    torch.nn.Linear(256, 256), torch.nn.ReLU(),
    torch.nn.Linear(256, 256), torch.nn.ReLU(),
    torch.nn.Linear(256, 10)).eval()

def small_torch(x):
    with torch.no_grad():
        return _mlp(x)
)";

// Runs after kSmallTorchSetup: the same MLP, compiled.
const char kCompiledModelSetup[] = R"(
_compiled = torch.compile(_mlp, backend="inductor")

def compiled_model(x):
    with torch.no_grad():
        return _compiled(x)

with torch.no_grad():  # compile now, not while measuring; and check it against eager
    _x = torch.randn(1, 64)
    assert torch.allclose(compiled_model(_x), _mlp(_x), atol=1e-5)
)";

// Calls per second with `threads` threads, thread t using interpreter
// index_of(t), each making `calls` calls (a session per call, as servers do).
double Throughput(InterpreterManager& manager, const Workload& workload, int threads, int calls,
                  const std::function<int(int)>& index_of) {
  std::atomic<int> failures{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < calls; ++i) {
        InterpreterSession session = manager.Acquire(index_of(t));
        StatusOr<Object> fn = session.Global("__main__", workload.function);
        StatusOr<Object> out = fn.ok() ? fn->Call(workload.args) : fn;
        if (!out.ok()) ++failures;
      }
    });
  }
  for (auto& worker : workers) worker.join();
  double seconds = SecondsSince(start);
  if (failures > 0)
    std::fprintf(stderr, "%s: %d calls failed\n", workload.name.c_str(), failures.load());
  return threads * calls / seconds;
}

// Calls needed for about `seconds` on one interpreter.
int Calibrate(InterpreterManager& manager, const Workload& workload, double seconds) {
  int calls = 10;
  while (true) {
    auto start = std::chrono::steady_clock::now();
    Throughput(manager, workload, 1, calls, [](int) { return 0; });
    double took = SecondsSince(start);
    if (took > 0.2) return std::max(10, static_cast<int>(calls * seconds / took));
    calls *= 4;
  }
}

nlohmann::json MeasureWorkload(InterpreterManager& manager, const Workload& workload, int n,
                               int rounds, double seconds) {
  for (int i = 0; i < manager.size(); ++i) {
    InterpreterSession session = manager.Acquire(i);
    session.Exec(workload.setup).CheckOk();
  }
  int calls = Calibrate(manager, workload, seconds);
  std::vector<double> rates = InterleavedMedians(
      rounds, {
                  [&] { return Throughput(manager, workload, 1, calls, [](int) { return 0; }); },
                  [&] { return Throughput(manager, workload, n, calls, [](int t) { return t; }); },
                  [&] { return Throughput(manager, workload, n, calls, [](int) { return 0; }); },
              });
  nlohmann::json result;
  result["calls_per_s"] = {{"one_interpreter", rates[0]},
                           {"n_interpreters", rates[1]},
                           {"one_interpreter_n_threads", rates[2]}};
  result["speedup_vs_one_interpreter"] = rates[1] / rates[0];
  result["speedup_vs_one_interpreter_threads"] = rates[1] / rates[2];
  return result;
}

// Resident memory by what it is: "library_copies" (each interpreter's
// private copies of libpython, libtorch_python and extension modules, from
// the library cache), "anonymous" (Python objects, heaps, stacks) and
// "shared_files" (everything mapped once per process: libtorch, the CUDA
// wheels' libraries, the host binary; "cuda_libraries" is the CUDA part of
// it); plus the copies by library name.
// The CUDA wheels' libraries (nvidia-*, triton) and torch's CUDA parts.
bool IsCudaLibrary(const std::string& path) {
  return IsGpuOnlyLibrary(path) || path.find("/triton/") != std::string::npos;
}

nlohmann::json ResidentMiBByKind(const std::string& cache) {
  char resolved[PATH_MAX];
  const std::string cache_root =
      std::string(realpath(cache.c_str(), resolved) ? resolved : cache.c_str()) + "/";
  double library_copies = 0, anonymous = 0, shared_files = 0, cuda_libraries = 0;
  nlohmann::json copies = nlohmann::json::object();
  for (const auto& [mapping, mib] : ResidentMiBByMapping()) {
    if (mapping == "[anonymous]") {
      anonymous += mib;
    } else if (mapping.rfind(cache_root, 0) == 0) {
      library_copies += mib;
      const std::string name = mapping.substr(mapping.rfind('/') + 1);
      copies[name] = copies.value(name, 0.0) + mib;
    } else {
      shared_files += mib;
      if (IsCudaLibrary(mapping)) cuda_libraries += mib;
    }
  }
  return {{"library_copies", library_copies},
          {"anonymous", anonymous},
          {"shared_files", shared_files},
          {"cuda_libraries", cuda_libraries},
          {"copies", copies}};
}

// Child mode: create n interpreters, report start-up time and RSS as JSON.
int StartupChild(int n, const std::string& cache) {
  double rss_before = ResidentMiB().value();
  auto start = std::chrono::steady_clock::now();
  InterpreterManagerOptions options;
  options.num_interpreters = n;
  options.cache_dir = cache;
  auto manager = InterpreterManager::Create(options);
  if (!manager.ok()) {
    std::cerr << manager.status().ToString() << "\n";
    return 1;
  }
  double startup = SecondsSince(start);
  nlohmann::json out = {{"startup_s", startup},
                        {"rss_mib", ResidentMiB().value()},
                        {"rss_before_mib", rss_before},
                        {"rss_by_kind_mib", ResidentMiBByKind(cache)}};
  std::cout << out.dump() << std::endl;
  std::_Exit(0);  // the parent measured what it needs; skip finalization
}

nlohmann::json RunChild(const std::string& self, int n, const std::string& cache) {
  std::string command = self + " --startup-child " + std::to_string(n) + " --cache '" + cache + "'";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  if (!pipe || pclose(pipe) != 0) throw std::runtime_error("startup child failed: " + command);
  return LastJsonLine(output);
}

nlohmann::json MeasureStartup(const std::string& self, int n, int rounds,
                              const std::string& cache) {
  RunChild(self, n, cache);  // warm the library cache and the page cache
  std::vector<double> startup_one, startup_n, rss_one, rss_n;
  nlohmann::json kinds_one, kinds_n;  // from the last round
  for (int round = 0; round < rounds; ++round) {
    nlohmann::json one = RunChild(self, 1, cache), many = RunChild(self, n, cache);
    startup_one.push_back(one["startup_s"]);
    startup_n.push_back(many["startup_s"]);
    rss_one.push_back(one["rss_mib"]);
    rss_n.push_back(many["rss_mib"]);
    kinds_one = one["rss_by_kind_mib"];
    kinds_n = many["rss_by_kind_mib"];
  }
  nlohmann::json result;
  result["startup_s"] = {{"one", Median(startup_one)}, {"n", Median(startup_n)}};
  result["startup_n_over_one"] = Median(startup_n) / Median(startup_one);
  result["rss_mib"] = {{"one", Median(rss_one)}, {"n", Median(rss_n)}};
  result["rss_mb_per_extra_interpreter"] =
      n > 1 ? (Median(rss_n) - Median(rss_one)) / (n - 1) : 0.0;
  // What one extra interpreter's memory is made of (one round's children).
  nlohmann::json per_extra = nlohmann::json::object();
  for (const char* kind : {"library_copies", "anonymous", "shared_files"}) {
    per_extra[kind] =
        n > 1 ? (kinds_n[kind].get<double>() - kinds_one[kind].get<double>()) / (n - 1) : 0.0;
  }
  nlohmann::json copies = nlohmann::json::object();
  for (const auto& [name, mib] : kinds_n["copies"].items()) {
    const double one = kinds_one["copies"].value(name, 0.0);
    if (n > 1 && mib.get<double>() - one >= 0.5) copies[name] = (mib.get<double>() - one) / (n - 1);
  }
  per_extra["library_copies_by_name"] = copies;
  result["rss_extra_interpreter_by_kind_mib"] = per_extra;
  // The process-wide libraries a plain `import torch` maps, of which the CUDA
  // wheels' (nvidia/*, triton) are paid once per process, not per interpreter.
  result["rss_cuda_libraries_mib"] = kinds_one["cuda_libraries"];
  return result;
}

void PrintTable(const nlohmann::json& r) {
  int n = r["interpreters"];
  std::printf("\nchorus interpreters: %d interpreters, %d hardware threads\n", n,
              static_cast<int>(std::thread::hardware_concurrency()));
  std::printf("%-13s %16s %16s %20s %10s %10s\n", "workload", "1 interp calls/s",
              "N interps calls/s", "1 interp N thr calls/s", "vs 1", "vs threads");
  for (const char* name : {"pure_python", "small_torch", "compiled_model"}) {
    if (!r.contains(name)) continue;
    const auto& w = r[name];
    std::printf("%-13s %16.1f %16.1f %20.1f %9.2fx %9.2fx\n", name,
                w["calls_per_s"]["one_interpreter"].get<double>(),
                w["calls_per_s"]["n_interpreters"].get<double>(),
                w["calls_per_s"]["one_interpreter_n_threads"].get<double>(),
                w["speedup_vs_one_interpreter"].get<double>(),
                w["speedup_vs_one_interpreter_threads"].get<double>());
  }
  std::printf("start-up: one interpreter %.2f s, %d interpreters %.2f s (%.2fx)\n",
              r["startup_s"]["one"].get<double>(), n, r["startup_s"]["n"].get<double>(),
              r["startup_n_over_one"].get<double>());
  const auto& kinds = r["rss_extra_interpreter_by_kind_mib"];
  std::printf(
      "memory: %.0f MiB with one interpreter, +%.1f MiB per extra interpreter "
      "(library copies %.1f, Python objects and heaps %.1f); CUDA libraries %.1f MiB "
      "once per process\n\n",
      r["rss_mib"]["one"].get<double>(), r["rss_mb_per_extra_interpreter"].get<double>(),
      kinds["library_copies"].get<double>(), kinds["anonymous"].get<double>(),
      r["rss_cuda_libraries_mib"].get<double>());
}

// The three workloads (compiled_model on torch 2.x only) on N interpreters and
// one, with the interpreters' torch and Python versions.
nlohmann::json MeasureWorkloads(InterpreterManager& manager, int n, int rounds, double seconds) {
  nlohmann::json result;
  Workload pure{"pure_python", kPurePythonSetup, "pure_python", {int64_t{20000}}};
  Workload torch{"small_torch", kSmallTorchSetup, "small_torch", {at::randn({1, 64})}};
  {
    InterpreterSession session = manager.Acquire(0);
    for (const auto& [key, expression] :
         {std::pair("torch_version", "__import__('torch').__version__"),
          std::pair("python_version", "__import__('platform').python_version()")}) {
      result[key] = (*session.Eval(expression)).ToIValue()->toStringRef();
    }
  }
  result["pure_python"] = MeasureWorkload(manager, pure, n, rounds, seconds);
  result["small_torch"] = MeasureWorkload(manager, torch, n, rounds, seconds);
  if (result["torch_version"].get<std::string>()[0] != '1') {
    Workload compiled{"compiled_model",
                      std::string(kSmallTorchSetup) + kCompiledModelSetup,
                      "compiled_model",
                      {at::randn({1, 64})}};
    result["compiled_model"] = MeasureWorkload(manager, compiled, n, rounds, seconds);
  }
  return result;
}

}  // namespace
}  // namespace chorus::bench

int main(int argc, char** argv) {
  using namespace chorus;
  using namespace chorus::bench;
  CLI::App app{"chorus interpreter benchmark: N interpreters vs one, side by side"};
  std::string out = "build/bench/interpreter.json";
  std::string cache = "build/bench-cache";
  int n = std::max(2u, std::thread::hardware_concurrency());
  int rounds = 5;
  double seconds = 1.0;
  int startup_child = 0;
  bool quick = false;
  AddCommonOptions(app, &out, &rounds, &cache);
  app.add_option("--interpreters", n, "N, the interpreters compared with one");
  app.add_option("--seconds", seconds, "target seconds per measured run");
  app.add_flag("--quick", quick, "fewer, shorter rounds (for make demo)");
  app.add_option("--startup-child", startup_child, "internal: child process mode")->group("");
  CLI11_PARSE(app, argc, argv);
  if (startup_child > 0) return StartupChild(startup_child, cache);
  if (quick) {
    rounds = 3;
    seconds = 0.3;
  }

  at::set_num_threads(1);
  InterpreterManagerOptions options;
  options.num_interpreters = n;
  options.cache_dir = cache;
  options.intra_op_threads = 1;
  auto manager = InterpreterManager::Create(options);
  if (!manager.ok()) {
    std::cerr << "cannot create interpreters: " << manager.status().ToString() << "\n";
    return 1;
  }
  nlohmann::json result;
  result["interpreters"] = n;
  result["hardware_threads"] = std::thread::hardware_concurrency();
  result["rounds"] = rounds;
  result.update(MeasureWorkloads(**manager, n, rounds, seconds));
  manager->reset();
  char self[4096] = {0};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return 1;
  nlohmann::json startup = MeasureStartup(self, n, quick ? 1 : 3, cache);
  result.update(startup);
  PrintTable(result);
  return WriteJson(out, result) ? 0 : 1;
}
