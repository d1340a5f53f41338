// host_app ARCHIVE [THREADS]: loads a chorus package and serves it from
// several threads at once, each call on an idle interpreter.
//
// What a C++ developer embedding chorus writes: create the interpreters,
// load the model, call it. Inputs are made from the manifest's signature
// (dynamic sizes become 2).
#include <ATen/ATen.h>
#include <chorus/interpreter/interpreter_manager.h>
#include <chorus/package/model.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

at::ScalarType DtypeOf(const std::string& name) {
  if (name == "float64") return at::kDouble;
  if (name == "int64") return at::kLong;
  if (name == "int32") return at::kInt;
  return at::kFloat;
}

std::vector<c10::IValue> InputsFor(const chorus::Manifest& manifest, int seed) {
  std::vector<c10::IValue> inputs;
  at::manual_seed(seed);
  for (const chorus::TensorSpec& spec : manifest.inputs) {
    std::vector<int64_t> shape;
    for (int64_t dim : spec.shape) shape.push_back(dim < 0 ? 2 : dim);
    inputs.push_back(at::randn(shape).to(DtypeOf(spec.dtype)));
  }
  return inputs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s ARCHIVE [THREADS]\n", argv[0]);
    return 2;
  }
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;

  chorus::InterpreterManagerOptions options;
  options.num_interpreters = threads;
  auto manager = chorus::InterpreterManager::Create(options);
  if (!manager.ok()) {
    std::fprintf(stderr, "cannot start interpreters: %s\n", manager.status().ToString().c_str());
    return 1;
  }
  auto model = chorus::Model::Load(manager->get(), argv[1]);
  if (!model.ok()) {
    std::fprintf(stderr, "cannot load %s: %s\n", argv[1], model.status().ToString().c_str());
    return 1;
  }
  const chorus::Manifest* manifest = (*model)->manifest();
  if (manifest == nullptr) {
    std::fprintf(stderr, "%s has no manifest\n", argv[1]);
    return 1;
  }
  std::printf("loaded %s version %s on %d interpreters\n", manifest->model_name.c_str(),
              manifest->model_version.c_str(), threads);

  std::vector<std::thread> workers;
  std::vector<int> failures(threads, 0);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int call = 0; call < 10; ++call) {
        auto out = (*model)->Forward(InputsFor(*manifest, call));
        if (!out.ok() || !out->isTensor()) ++failures[t];
      }
    });
  }
  for (auto& worker : workers) worker.join();
  int failed = 0;
  for (int f : failures) failed += f;

  auto out = (*model)->Forward(InputsFor(*manifest, 0));
  if (!out.ok()) {
    std::fprintf(stderr, "forward failed: %s\n", out.status().ToString().c_str());
    return 1;
  }
  at::Tensor y = out->toTensor();
  std::printf("output %s shape [%lld, %lld], sum %.6f; %d of %d threaded calls failed\n",
              manifest->outputs[0].name.c_str(), static_cast<long long>(y.size(0)),
              static_cast<long long>(y.dim() > 1 ? y.size(1) : 1), y.sum().item<double>(), failed,
              threads * 10);
  return failed == 0 ? 0 : 1;
}
