// make bench-package: loading a >= 500 MB model, chorus against the stock
// torch.package importer.
//
// In each round, one child process loads the model with chorus into 4
// interpreters (first load: open + validate + unpickle in one interpreter;
// then each extra interpreter) and measures resident memory growth once
// every interpreter has touched every weight; another child loads it with
// stock PackageImporter in plain Python. The page cache is warm for both.
// Reported figures are medians over the rounds, ratios taken within the run.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/package/model.h"
#include "tests/bench/bench_util.h"

namespace chorus::bench {
namespace {

constexpr int kInterpreters = 4;

std::string PythonEnv(const std::string& python_dir) {
  return "PYTHONPATH=" + python_dir + " " + CHORUS_PYTHON + " ";
}

// Writes the benchmark model (8 x Linear(4096, 4096): 512 MiB) once.
void EnsureLargeArchive(const std::string& path, const std::string& python_dir) {
  EnsureArchive(path, CHORUS_PYTHON, python_dir, R"(
import sys, torch
from chorus.package import create_package
torch.manual_seed(0)
layers = []
for _ in range(8):
    layers += [torch.nn.Linear(4096, 4096), torch.nn.ReLU()]
create_package(sys.argv[1], torch.nn.Sequential(*layers[:-1]), (torch.randn(1, 4096),),
               name="large", progress=False)
)",
                "large");
}

int ChorusChild(const std::string& path, const std::string& cache) {
  InterpreterManagerOptions options;
  options.num_interpreters = kInterpreters;
  options.cache_dir = cache;
  auto manager = InterpreterManager::Create(options);
  if (!manager.ok()) return 1;
  for (int i = 0; i < kInterpreters; ++i) {  // torch warmed up everywhere first
    InterpreterSession session = (*manager)->Acquire(i);
    if (!session.Exec("import torch\ntorch.ones(64, 64).sum()").ok()) return 1;
  }
  const double rss_before = ResidentMiB().value();
  auto start = std::chrono::steady_clock::now();
  auto model = Model::Load(manager->get(), path);
  if (!model.ok()) {
    std::cerr << model.status().ToString() << "\n";
    return 1;
  }
  const double first = SecondsSince(start);
  std::vector<double> extra;
  for (int i = 0; i < kInterpreters; ++i) {
    InterpreterSession session = (*manager)->Acquire(i);
    auto t = std::chrono::steady_clock::now();
    StatusOr<Object> replica = (*model)->In(session);
    double took = SecondsSince(t);
    if (!replica.ok()) return 1;
    StatusOr<Object> touch =
        session.Eval("lambda m: sum(float(p.double().sum()) for p in m.parameters())");
    if (!touch.ok() || !touch->CallObjects({*replica}).ok()) return 1;
    if (took > 1e-4 || i > 0) extra.push_back(took);  // the first one was made by Load
  }
  double weights_mib = 0;
  for (const ArchiveRecord& r : (*model)->archive()->records()) {
    if (r.name.find(".storage") != std::string::npos) weights_mib += r.size / 1048576.0;
  }
  nlohmann::json out = {{"first_s", first},
                        {"extra_s", Median(extra)},
                        {"rss_growth_mib", ResidentMiB().value() - rss_before},
                        {"weights_mib", weights_mib}};
  std::cout << out.dump() << std::endl;
  std::_Exit(0);
}

const char kStockLoad[] = R"(
import json, sys, time, zipfile
import torch
from torch.package import PackageImporter
archive = zipfile.ZipFile(sys.argv[1])
name = next(n for n in archive.namelist() if n.endswith("/.data/chorus/manifest.json"))
manifest = json.loads(archive.read(name))
entry = manifest["entry_point"]
start = time.perf_counter()
model = PackageImporter(sys.argv[1]).load_pickle(entry["package"], entry["resource"])
print(json.dumps({"load_s": time.perf_counter() - start}))
)";

}  // namespace
}  // namespace chorus::bench

int main(int argc, char** argv) {
  using namespace chorus::bench;
  CLI::App app{"chorus package benchmark: loading a large model"};
  std::string out = "build/bench/package.json", data_dir = "build/bench-data";
  std::string cache = "build/bench-cache", child_archive;
  int rounds = 3;
  AddCommonOptions(app, &out, &rounds, &cache);
  app.add_option("--data", data_dir, "where the benchmark model is kept");
  app.add_option("--chorus-child", child_archive, "internal: child process mode")->group("");
  CLI11_PARSE(app, argc, argv);
  if (!child_archive.empty()) return ChorusChild(child_archive, cache);

  char self[4096] = {0};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return 1;
  const std::string python_dir =
      std::string(self).substr(0, std::string(self).rfind("/bin/")) + "/share/chorus/python";
  std::system(("mkdir -p " + data_dir).c_str());
  const std::string archive = data_dir + "/large.pt";
  EnsureLargeArchive(archive, python_dir);
  std::ofstream(data_dir + "/stock_load.py") << kStockLoad;
  RunCapture("cat " + archive + " > /dev/null");  // warm the page cache for everyone

  std::vector<double> first, extra, stock, growth;
  double weights_mib = 0;
  for (int round = 0; round < rounds; ++round) {
    std::string chorus_out =
        RunCapture(std::string(self) + " --chorus-child " + archive + " --cache " + cache);
    auto c = LastJsonLine(chorus_out);
    std::string stock_out =
        RunCapture(PythonEnv(python_dir) + data_dir + "/stock_load.py " + archive);
    auto s = LastJsonLine(stock_out);
    first.push_back(c["first_s"]);
    extra.push_back(c["extra_s"]);
    growth.push_back(c["rss_growth_mib"]);
    weights_mib = c["weights_mib"];
    stock.push_back(s["load_s"]);
  }
  nlohmann::json result;
  result["weights_mib"] = weights_mib;
  result["interpreters"] = kInterpreters;
  result["rounds"] = rounds;
  result["load_s"] = {{"chorus_first", Median(first)},
                      {"chorus_each_extra_interpreter", Median(extra)},
                      {"torch_package_importer", Median(stock)}};
  result["extra_interpreter_load_vs_stock_importer"] = Median(extra) / Median(stock);
  result["rss_growth_over_weights"] = Median(growth) / weights_mib;
  std::printf("\nloading a %.0f MiB model (%d rounds, medians)\n", weights_mib, rounds);
  std::printf("  chorus, first interpreter      %8.3f s\n", Median(first));
  std::printf("  chorus, each extra interpreter %8.4f s  (%.4fx the stock importer)\n",
              Median(extra), Median(extra) / Median(stock));
  std::printf("  stock torch.package importer   %8.3f s\n", Median(stock));
  std::printf("  RSS growth with %d interpreters: %.0f MiB = %.3fx the weights\n\n", kInterpreters,
              Median(growth), Median(growth) / weights_mib);
  return WriteJson(out, result) ? 0 : 1;
}
