#include "tests/bench/serve_models.h"

#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace chorus::bench {
namespace {

const char kModels[] = R"(
import torch

import chorus
from chorus import serving

class Trivial(torch.nn.Module):
    def forward(self, x):
        return x

class PythonHeavy(torch.nn.Module):
    """About a millisecond of pure Python per call: the GIL-bound case."""
    def forward(self, x):
        total = 0
        for i in range(20000):
            total += i % 7
        return x + total

class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    def forward(self, x):
        return self.net(x)

class RowSums(torch.nn.Module):
    def forward(self, x):
        return x.sum(dim=1)

class CallsTrivial(torch.nn.Module):
    """Answers what the trivial model answers, through one in-process call."""
    def forward(self, x):
        if not chorus.inside_chorus():  # packaging runs it outside the server
            return x
        return next(iter(serving.infer("trivial", {"x": x}).values()))

def trivial(): return Trivial()
def calls_trivial(): return CallsTrivial()
def trivial_cached(): return Trivial()
def row_sums(): return RowSums()
def big_inputs(): return (torch.zeros(1024, 1024),)
def heavy(): return PythonHeavy()
def mlp(): return Mlp()
def example_inputs(): return (torch.zeros(1, 4),)
)";

}  // namespace

std::string MakeRepository(const std::string& relative, const std::string& bin) {
  std::system(("rm -rf '" + relative + "' && mkdir -p '" + relative + "/repo'").c_str());
  char absolute[4096];
  if (realpath(relative.c_str(), absolute) == nullptr) throw std::runtime_error("no " + relative);
  const std::string dir = absolute;
  std::ofstream(dir + "/bench_models.py") << kModels;
  struct Packaged {
    const char* name;
    const char* extra;
    const char* examples;
  };
  for (auto [name, extra, examples] :
       {Packaged{"trivial", "--no-batching", "example_inputs"},
        Packaged{"heavy", "--no-batching", "example_inputs"},
        Packaged{"trivial_cached", "--no-batching", "example_inputs"},
        Packaged{"calls_trivial", "--no-batching", "example_inputs"},
        Packaged{"mlp", "--max-batch-size 64", "example_inputs"},
        Packaged{"row_sums", "--no-batching", "big_inputs"}}) {
    std::string folder = dir + "/repo/" + name + "/1";
    std::string command = "mkdir -p '" + folder + "' && cd '" + dir + "' && " + bin +
                          "/chorus-package create '" + folder +
                          "/model.pt' --module bench_models:" + name +
                          " --example-inputs bench_models:" + examples + " --name " + name + " " +
                          extra + " --quiet > /dev/null";
    if (std::system(command.c_str()) != 0) throw std::runtime_error("packaging failed: " + command);
  }
  std::ofstream(dir + "/repo/mlp/config.json") << R"({"max_queue_delay_us": 2000})";
  std::ofstream(dir + "/repo/trivial_cached/config.json")
      << R"({"response_cache": {"enable": true}})";
  return dir + "/repo";
}

}  // namespace chorus::bench
