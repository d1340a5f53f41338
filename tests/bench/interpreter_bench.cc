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
// --startup-child), one interpreter against N: as chorus starts interpreters
// (deferred imports), with every interpreter importing all of torch
// (--eager-imports), and with each holding a resnet18 replica (both ways).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/ivalue.h>

#include <unistd.h>
#include <CLI/CLI.hpp>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chorus/interpreter/gpu_host.h"
#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/package/model.h"
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

// What a start-up child makes: n interpreters, with deferred imports or not,
// each holding the replica of `archive`'s model when one is given.
struct StartupConfig {
  std::string archive;
  bool eager_imports = false;
};

// Child mode: create the interpreters, report start-up time and memory as JSON.
int StartupChild(int n, const std::string& cache, const StartupConfig& config) {
  double rss_before = ResidentMiB().value();
  auto start = std::chrono::steady_clock::now();
  InterpreterManagerOptions options;
  options.num_interpreters = n;
  options.cache_dir = cache;
  options.defer_imports = !config.eager_imports;
  auto manager = InterpreterManager::Create(options);
  std::shared_ptr<Model> model;
  Status loaded = manager.status();
  if (loaded.ok() && !config.archive.empty()) {
    StatusOr<std::shared_ptr<Model>> made = Model::Load(manager->get(), config.archive);
    loaded = made.status();
    for (int i = 0; loaded.ok() && i < n; ++i) {
      model = *made;
      InterpreterSession session = (*manager)->Acquire(i);
      loaded = model->In(session).status();
    }
  }
  if (!loaded.ok()) {
    std::cerr << loaded.ToString() << "\n";
    return 1;
  }
  double startup = SecondsSince(start);
  InterpreterSession session = (*manager)->Acquire(n - 1);
  int64_t modules = session.Eval("len(__import__('sys').modules)")->ToIValue()->toInt();
  nlohmann::json out = {
      {"startup_s", startup},         {"rss_mib", ResidentMiB().value()},
      {"pss_mib", ProportionalMiB()}, {"rss_before_mib", rss_before},
      {"modules", modules},           {"rss_by_kind_mib", ResidentMiBByKind(cache)}};
  std::cout << out.dump() << std::endl;
  std::_Exit(0);  // the parent measured what it needs; skip finalization
}

nlohmann::json RunChild(const std::string& self, int n, const std::string& cache,
                        const StartupConfig& config) {
  std::string command = self + " --startup-child " + std::to_string(n) + " --cache '" + cache +
                        "'" + (config.eager_imports ? " --eager-imports" : "");
  if (!config.archive.empty()) command += " --archive '" + config.archive + "'";
  return LastJsonLine(RunCapture(command));
}

// What one extra interpreter's memory is made of, from one round's children.
nlohmann::json PerExtraByKind(const nlohmann::json& kinds_one, const nlohmann::json& kinds_n,
                              int n) {
  nlohmann::json per_extra = nlohmann::json::object();
  for (const char* kind : {"library_copies", "anonymous", "shared_files"}) {
    per_extra[kind] = (kinds_n[kind].get<double>() - kinds_one[kind].get<double>()) / (n - 1);
  }
  nlohmann::json copies = nlohmann::json::object();
  for (const auto& [name, mib] : kinds_n["copies"].items()) {
    const double one = kinds_one["copies"].value(name, 0.0);
    if (mib.get<double>() - one >= 0.5) copies[name] = (mib.get<double>() - one) / (n - 1);
  }
  per_extra["library_copies_by_name"] = copies;
  return per_extra;
}

// Children with one interpreter and with n (n > 1), `rounds` times each,
// interleaved: start-up time, memory per extra interpreter (RSS, and PSS,
// which counts the pages of a library mapped by several interpreters once),
// modules an interpreter holds.
nlohmann::json MeasureStartup(const std::string& self, int n, int rounds, const std::string& cache,
                              const StartupConfig& config) {
  RunChild(self, n, cache, config);  // warm the library cache and the page cache
  std::map<std::string, std::vector<double>> one, many;
  nlohmann::json last_one, last_many;
  for (int round = 0; round < rounds; ++round) {
    last_one = RunChild(self, 1, cache, config);
    last_many = RunChild(self, n, cache, config);
    for (const char* key : {"startup_s", "rss_mib", "pss_mib"}) {
      one[key].push_back(last_one[key]);
      many[key].push_back(last_many[key]);
    }
  }
  auto per_extra = [&](const char* key) {
    return (Median(many[key]) - Median(one[key])) / (n - 1);
  };
  nlohmann::json result;
  result["startup_s"] = {{"one", Median(one["startup_s"])}, {"n", Median(many["startup_s"])}};
  result["startup_n_over_one"] = Median(many["startup_s"]) / Median(one["startup_s"]);
  result["rss_mib"] = {{"one", Median(one["rss_mib"])}, {"n", Median(many["rss_mib"])}};
  result["pss_mib"] = {{"one", Median(one["pss_mib"])}, {"n", Median(many["pss_mib"])}};
  result["rss_mb_per_extra_interpreter"] = per_extra("rss_mib");
  result["pss_mb_per_extra_interpreter"] = per_extra("pss_mib");
  result["modules_per_interpreter"] = last_many["modules"];
  result["rss_extra_interpreter_by_kind_mib"] =
      PerExtraByKind(last_one["rss_by_kind_mib"], last_many["rss_by_kind_mib"], n);
  // The process-wide libraries a plain `import torch` maps, of which the CUDA
  // wheels' (nvidia/*, triton) are paid once per process, not per interpreter.
  result["rss_cuda_libraries_mib"] = last_one["rss_by_kind_mib"]["cuda_libraries"];
  return result;
}

// Start-up and memory four ways: as chorus starts interpreters (deferred
// imports), with every interpreter importing all of torch (eager imports),
// and with every interpreter holding the resnet18 replica of `archive`, with
// deferred and with eager imports. The first's figures are the result's
// top-level keys.
nlohmann::json MeasureStartups(const std::string& self, int n, int rounds, const std::string& cache,
                               const std::string& archive) {
  nlohmann::json result = MeasureStartup(self, n, rounds, cache, {});
  nlohmann::json eager =
      MeasureStartup(self, n, rounds, cache, {.archive = "", .eager_imports = true});
  nlohmann::json vision = MeasureStartup(self, n, rounds, cache, {.archive = archive});
  nlohmann::json vision_eager =
      MeasureStartup(self, n, rounds, cache, {.archive = archive, .eager_imports = true});
  result["eager_imports"] = eager;
  result["torchvision"] = vision;
  result["torchvision_eager_imports"] = vision_eager;
  for (const char* key : {"rss_mb_per_extra_interpreter", "pss_mb_per_extra_interpreter"}) {
    result[std::string(key) + "_eager_imports"] = eager[key];
    result[std::string(key) + "_torchvision"] = vision[key];
    result[std::string(key) + "_torchvision_eager_imports"] = vision_eager[key];
  }
  return result;
}

// Writes the torchvision resnet18 (seeded weights) as a chorus archive once.
void EnsureResnetArchive(const std::string& path, const std::string& python_dir) {
  EnsureArchive(path, CHORUS_PYTHON, python_dir, R"(
import sys, torch, torchvision
from chorus.package import create_package
torch.manual_seed(0)
model = torchvision.models.resnet18().eval()
create_package(sys.argv[1], model, (torch.randn(1, 3, 64, 64),), name="resnet18",
               progress=False)
)",
                "resnet18");
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
      "(library copies %.1f, Python objects and heaps %.1f; PSS +%.1f; %d modules); CUDA "
      "libraries %.1f MiB once per process\n",
      r["rss_mib"]["one"].get<double>(), r["rss_mb_per_extra_interpreter"].get<double>(),
      kinds["library_copies"].get<double>(), kinds["anonymous"].get<double>(),
      r["pss_mb_per_extra_interpreter"].get<double>(), r["modules_per_interpreter"].get<int>(),
      r["rss_cuda_libraries_mib"].get<double>());
  for (const char* variant : {"eager_imports", "torchvision", "torchvision_eager_imports"}) {
    const auto& v = r[variant];
    std::printf("  %s: +%.1f MiB RSS, +%.1f MiB PSS per extra interpreter, %d modules\n", variant,
                v["rss_mb_per_extra_interpreter"].get<double>(),
                v["pss_mb_per_extra_interpreter"].get<double>(),
                v["modules_per_interpreter"].get<int>());
  }
  std::printf("\n");
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
  StartupConfig child;
  bool quick = false;
  AddCommonOptions(app, &out, &rounds, &cache);
  app.add_option("--interpreters", n, "N, the interpreters compared with one");
  app.add_option("--seconds", seconds, "target seconds per measured run");
  app.add_flag("--quick", quick, "fewer, shorter rounds (for make demo)");
  app.add_option("--startup-child", startup_child, "internal: child process mode")->group("");
  app.add_option("--archive", child.archive, "internal: the child's model")->group("");
  app.add_flag("--eager-imports", child.eager_imports, "internal: the child's imports")->group("");
  CLI11_PARSE(app, argc, argv);
  if (startup_child > 0) return StartupChild(startup_child, cache, child);
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
  const std::string self_path(self);
  const std::string build_dir = self_path.substr(0, self_path.rfind("/bin/"));
  const std::string archive = build_dir + "/bench/resnet18.pt";
  EnsureResnetArchive(archive, build_dir + "/share/chorus/python");
  nlohmann::json startup = MeasureStartups(self, n, quick ? 1 : 3, cache, archive);
  result.update(startup);
  PrintTable(result);
  return WriteJson(out, result) ? 0 : 1;
}
