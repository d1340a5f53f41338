// The interpreters in their process: installed and GPU-only packages and
// libraries, a silent start, sixteen interpreters, stress from many threads,
// and managers that come and go.
#include "chorus/interpreter/interpreter_manager.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "chorus/common/file_util.h"
#include "chorus/common/process_stats.h"
#include "chorus/common/status_matchers.h"
#include "chorus/interpreter/gpu_host.h"
#include "interpreter/src/interpreter_test_support.h"

namespace chorus::testing {
namespace {

std::vector<std::string> ListFilesRecursively(const std::string& dir) {
  std::vector<std::string> files;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return files;
  while (dirent* entry = readdir(d)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    std::string path = dir + "/" + name;
    if (entry->d_type == DT_DIR) {
      for (auto& f : ListFilesRecursively(path)) files.push_back(f);
    } else {
      files.push_back(path);
    }
  }
  closedir(d);
  return files;
}

TEST_F(InterpreterTest, InstalledModulesImportInEveryInterpreter) {
  // Standard-library C extensions (lib-dynload), numpy, torch.
  const char* kCheck = R"(
import ctypes, decimal, hashlib, json, sqlite3, ssl, zoneinfo
import numpy, torch
stdlib_ok = (json.loads('[1, 2]') == [1, 2] and str(decimal.Decimal('1.10') + 1) == '2.10'
             and ctypes.sizeof(ctypes.c_int64) == 8 and sqlite3.connect(':memory:') is not None)
)";
  for (int i = 0; i < kInterpreters; ++i) {
    InterpreterSession session = manager().Acquire(i);
    Status imported = session.Exec(kCheck);
    ASSERT_OK(imported) << "interpreter " << i;
    ASSERT_OK_AND_ASSIGN(Object stdlib_ok, session.Eval("stdlib_ok"));
    ASSERT_OK_AND_ASSIGN(c10::IValue stdlib_ok_value, stdlib_ok.ToIValue());
    EXPECT_TRUE(stdlib_ok_value.toBool());
  }
}

// torchvision (its own C++ ops library, registered once with the dispatcher)
// where the venv has it: a torch release can come out before its torchvision.
TEST_F(InterpreterTest, TorchvisionRunsInEveryInterpreter) {
  {
    InterpreterSession session = manager().Acquire(0);
    ASSERT_OK_AND_ASSIGN(Object found,
                         session.Eval("__import__('importlib.util').util.find_spec('torchvision') "
                                      "is not None"));
    ASSERT_OK_AND_ASSIGN(c10::IValue found_value, found.ToIValue());
    if (!found_value.toBool()) GTEST_SKIP() << "this venv has no torchvision";
  }
  const char* kResnet = R"(
import torch, torchvision
torch.manual_seed(0)
_resnet = torchvision.models.resnet18(num_classes=10).eval()
with torch.no_grad():
    resnet_shape = list(_resnet(torch.randn(1, 3, 32, 32)).shape)
)";
  for (int i = 0; i < kInterpreters; ++i) {
    InterpreterSession session = manager().Acquire(i);
    Status ran = session.Exec(kResnet);
    ASSERT_OK(ran) << "interpreter " << i;
    ASSERT_OK_AND_ASSIGN(Object resnet_shape, session.Eval("resnet_shape"));
    ASSERT_OK_AND_ASSIGN(c10::IValue resnet_shape_value, resnet_shape.ToIValue());
    EXPECT_EQ(resnet_shape_value.toIntVector(), (std::vector<int64_t>{1, 10}));
  }
}

// No copy of triton's or cuda.bindings' extensions is mapped: each mapped
// copy's `source` file (beside it in the cache) names the file it copies.
void ExpectNoCopyOfGpuOnlyExtensionsIsMapped() {
  ASSERT_OK_AND_ASSIGN(std::string maps, ReadFile("/proc/self/maps"));
  const std::string libs = std::string(kCacheDir) + "/libs/";
  std::set<std::string> sources;
  for (size_t at = maps.find(libs); at != std::string::npos; at = maps.find(libs, at)) {
    const size_t end = maps.find('\n', at);
    const std::string copy = maps.substr(at, end - at);
    sources.insert(copy.substr(0, copy.rfind('/')) + "/source");
    at = end;
  }
  EXPECT_GT(sources.size(), 4u);  // libpython, libtorch_python, torch._C, ...
  for (const std::string& source : sources) {
    ASSERT_OK_AND_ASSIGN(std::string text, ReadFile(source));
    EXPECT_EQ(text.find("triton"), std::string::npos) << source << ": " << text;
    EXPECT_EQ(text.find("/cuda/bindings/"), std::string::npos) << source << ": " << text;
  }
}

// triton and NVIDIA's CUDA bindings drive a GPU only (triton's extension is
// 500 MB): without a GPU no interpreter loads them (torch then behaves as from
// its CPU wheels), and the cache holds no copy of their extensions.
TEST_F(InterpreterTest, GpuOnlyPackagesAreLoadedOnlyWhereAGpuCanRunThem) {
  const bool gpu = at::detail::getCUDAHooks().getNumGPUs() > 0;
  for (int i = 0; i < kInterpreters; ++i) {
    InterpreterSession session = manager().Acquire(i);
    ASSERT_OK(session.Exec(R"(
import importlib.machinery, importlib.util, sys
import torch._dynamo  # imports triton when it can
import torch.cuda._utils  # imports cuda.bindings when it can
from torch.utils._triton import has_triton_package
def installed(name):
    return importlib.machinery.PathFinder.find_spec(name) is not None
triton_installed = installed('triton')
triton_seen = [int(has_triton_package()), int(importlib.util.find_spec('triton') is not None),
               int(sys.modules.get('triton') is not None)]
bindings_installed = (installed('cuda') and importlib.machinery.PathFinder.find_spec(
    'bindings', [p + '/cuda' for p in sys.path if isinstance(p, str)]) is not None)
def importable(name):
    try:
        importlib.import_module(name)
        return 1
    except ImportError:
        return 0
# torch.cuda imports them when it can (torch 2.14; torch 2.11 does not use them).
bindings_seen = [importable('cuda.bindings'),
                 int(getattr(torch.cuda._utils, '_HAS_CUDA_BINDINGS', importable('cuda.bindings')))]
)"));
    ASSERT_OK_AND_ASSIGN(Object triton, session.Eval("triton_installed"));
    ASSERT_OK_AND_ASSIGN(Object bindings, session.Eval("bindings_installed"));
    if (!triton.ToIValue()->toBool() && !bindings.ToIValue()->toBool()) {
      GTEST_SKIP() << "neither triton nor cuda.bindings is installed";
    }
    if (triton.ToIValue()->toBool()) {
      ASSERT_OK_AND_ASSIGN(Object seen, session.Eval("triton_seen"));
      EXPECT_EQ(seen.ToIValue()->toIntVector(), std::vector<int64_t>(3, gpu ? 1 : 0))
          << "interpreter " << i;
    }
    if (bindings.ToIValue()->toBool()) {
      ASSERT_OK_AND_ASSIGN(Object seen, session.Eval("bindings_seen"));
      EXPECT_EQ(seen.ToIValue()->toIntVector(), std::vector<int64_t>(2, gpu ? 1 : 0))
          << "interpreter " << i;
    }
  }
  if (gpu) return;
  ExpectNoCopyOfGpuOnlyExtensionsIsMapped();
}

TEST(GpuHostTest, GpuOnlyLibrariesAreTheCudaWheelsAndTorchsCudaParts) {
  const std::string torch = "/venv/lib/python3.11/site-packages/torch/lib/";
  EXPECT_TRUE(
      IsGpuOnlyLibrary("/venv/lib/python3.11/site-packages/nvidia/cu13/lib/"
                       "libcublasLt.so.13"));
  EXPECT_TRUE(IsGpuOnlyLibrary(torch + "libtorch_cuda.so"));
  EXPECT_TRUE(IsGpuOnlyLibrary(torch + "libc10_cuda.so"));
  EXPECT_TRUE(IsGpuOnlyLibrary("/usr/local/cuda-13.0/lib64/libcudart.so.13"));
  EXPECT_FALSE(IsGpuOnlyLibrary(torch + "libtorch_cpu.so"));
  EXPECT_FALSE(IsGpuOnlyLibrary(torch + "libtorch_python.so"));
  EXPECT_FALSE(IsGpuOnlyLibrary("/usr/lib/x86_64-linux-gnu/libc.so.6"));
  EXPECT_FALSE(IsGpuOnlyLibrary("/venv/lib/python3.11/site-packages/nvidia/README.txt"));
}

// MiB of this process's mappings of GPU-only libraries, summed over one
// /proc/self/smaps field ("Rss:", "Private_Clean:").
double GpuLibraryMiB(const std::string& field) {
  StatusOr<std::string> smaps = ReadFile("/proc/self/smaps");
  if (!smaps.ok()) return -1;
  double kib = 0;
  bool counting = false;
  size_t at = 0;
  while (at < smaps->size()) {
    size_t end = smaps->find('\n', at);
    if (end == std::string::npos) end = smaps->size();
    const std::string line = smaps->substr(at, end - at);
    at = end + 1;
    if (line.compare(0, field.size(), field) == 0) {
      if (counting) kib += std::strtod(line.c_str() + field.size(), nullptr);
    } else if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
               line.find('-') < line.find(' ')) {  // a mapping's header line
      const size_t path = line.find('/');
      counting = path != std::string::npos && IsGpuOnlyLibrary(line.substr(path));
    }
  }
  return kib / 1024;
}

// torch's CUDA wheels load the CUDA libraries into every process; on a host
// without a GPU the pages loading touched can be given back (the server's
// idle release does), and torch runs on without them.
TEST_F(InterpreterTest, WithoutAGpuTheCudaLibrariesPagesCanBeGivenBack) {
  if (HostHasGpu()) GTEST_SKIP() << "a GPU host uses them";
  if (GpuLibraryMiB("Rss:") == 0) GTEST_SKIP() << "a torch without CUDA libraries";
  const double before = GpuLibraryMiB("Private_Clean:");
  // Pages another process maps too are not reclaimed (and are shared anyway).
  if (before < 20) GTEST_SKIP() << "another process maps the same pages: " << before << " MiB";
  ASSERT_OK_AND_ASSIGN(double released, PageOutMappedFiles(IsGpuOnlyLibrary));
  EXPECT_GE(released, 0.8 * before) << before << " MiB before";
  EXPECT_LT(GpuLibraryMiB("Private_Clean:"), 2.0);
  for (int i = 0; i < kInterpreters; ++i) {
    InterpreterSession session = manager().Acquire(i);
    ASSERT_OK_AND_ASSIGN(Object sum, session.Eval("float(__import__('torch').ones(3, 3).sum())"));
    EXPECT_EQ(sum.ToIValue()->toDouble(), 9.0);
  }
  std::printf("paged out %.0f MiB of CUDA library pages (%.0f MiB private before)\n", released,
              before);
}

// Run in a child process by ImportingTorchIsSilent below.
TEST(InterpreterChild, CreateFourInterpretersAndRunTorch) {
  if (std::getenv("CHORUS_INTERPRETER_CHILD") == nullptr) GTEST_SKIP() << "child mode only";
  auto manager = CreateManager(kInterpreters, kCacheDir);
  ASSERT_OK(manager);
  for (int i = 0; i < kInterpreters; ++i) {
    InterpreterSession session = (*manager)->Acquire(i);
    ASSERT_OK_AND_ASSIGN(
        Object out, session.Eval("float(__import__('torch').nn.functional.relu(__import__('torch'"
                                 ").tensor([-1.0, 2.0])).sum())"));
    ASSERT_OK_AND_ASSIGN(c10::IValue out_value, out.ToIValue());
    EXPECT_EQ(out_value.toDouble(), 2.0);
  }
}

// torch's import-time registrations in four interpreters of one process: no
// error, no "Overriding a previously registered kernel", nothing on stderr but
// chorus' own log line.
TEST(InterpreterStartupTest, ImportingTorchInFourInterpretersIsSilent) {
  std::string command =
      "CHORUS_INTERPRETER_CHILD=1 CHORUS_LOG_LEVEL=warn /proc/self/exe "
      "--gtest_filter=InterpreterChild.* --gtest_brief=1 2>&1";
  char self[4096] = {0};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  command.replace(command.find("/proc/self/exe"), 14, self);
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  ASSERT_EQ(pclose(pipe), 0) << output;
  EXPECT_NE(output.find("1 test"), std::string::npos) << output;
  for (const char* noise : {"Overriding", "Warning", "warning", "Traceback", "Error", "error"}) {
    EXPECT_EQ(output.find(noise), std::string::npos) << "found \"" << noise << "\" in:\n" << output;
  }
}

// chorus' interpreters defer what torch imports but rarely uses
// (python/chorus/_deferred_imports.py): each deferred module is pending after
// start and works on first use, in every interpreter; defer_imports = false
// imports all of torch as `import torch` does.
TEST(InterpreterImportsTest, DeferredByDefaultUsedOnFirstAccessEagerWhenAsked) {
  constexpr char kPending[] = "__import__('chorus._deferred_imports', fromlist=['_']).pending()";
  for (bool defer : {true, false}) {
    InterpreterManagerOptions options;
    options.num_interpreters = 2;
    options.cache_dir = kCacheDir;
    options.defer_imports = defer;
    ASSERT_OK_AND_ASSIGN(auto manager, InterpreterManager::Create(options));
    for (int i = 0; i < 2; ++i) {
      InterpreterSession session = manager->Acquire(i);
      ASSERT_OK_AND_ASSIGN(Object pending, session.Eval(defer ? kPending : "[]"));
      ASSERT_OK_AND_ASSIGN(Object in_modules,
                           session.Eval("'torch.distributions' in __import__('sys').modules"));
      ASSERT_OK_AND_ASSIGN(c10::IValue names, pending.ToIValue());
      std::set<std::string> pending_names;
      for (const c10::IValue& name : names.toListRef()) pending_names.insert(name.toStringRef());
      if (defer) {
        for (const char* name : {"torch.distributions", "torch.optim", "torch.utils.data"}) {
          EXPECT_TRUE(pending_names.count(name)) << name << " was imported at start";
        }
      } else {
        EXPECT_TRUE(in_modules.ToIValue()->toBool());  // imported, and executed:
      }
      ASSERT_OK_AND_ASSIGN(
          Object log_prob,
          session.Eval("round(__import__('torch').distributions.Normal(0.0, 1.0).log_prob("
                       "__import__('torch').tensor(0.0)).item(), 5)"));
      EXPECT_DOUBLE_EQ(log_prob.ToIValue()->toDouble(), -0.91894);
      ASSERT_OK_AND_ASSIGN(Object after, session.Eval("type(__import__('sys').modules["
                                                      "'torch.distributions']).__name__"));
      EXPECT_EQ(after.ToIValue()->toStringRef(), "module");
    }
  }
}

// More interpreters than library slots with one-digit names (the wheel's
// libtorch_python.so has no version to shorten), each importing torch.
TEST(InterpreterScaleTest, SixteenInterpretersImportTorch) {
  auto manager = CreateManager(16, kCacheDir);
  ASSERT_OK(manager);
  for (int i = 0; i < 16; ++i) {
    InterpreterSession session = (*manager)->Acquire(i);
    ASSERT_OK_AND_ASSIGN(Object sum, session.Eval("float(__import__('torch').ones(3).sum())"));
    ASSERT_OK_AND_ASSIGN(c10::IValue sum_value, sum.ToIValue());
    EXPECT_EQ(sum_value.toDouble(), 3.0);
  }
}

// Tensors crossing both ways between host threads that hold no GIL and four
// interpreters, storages wrapped in Python on both sides and released on
// other threads: no crash, no deadlock, and no leak.
TEST(InterpreterStressTest, TensorsCrossBothWaysFromManyThreadsWithoutLeaking) {
  auto created = CreateManager(4, kCacheDir);
  ASSERT_OK(created);
  InterpreterManager& manager = **created;
  ReplicatedObject work = manager.Replicate([](InterpreterSession& session) -> StatusOr<Object> {
    CHORUS_RETURN_IF_ERROR(session.Exec(R"(
import torch
_kept = []
def work(t):
    _kept.append(getattr(t, "untyped_storage", t.storage)())  # wrapped here, released later
    if len(_kept) > 8:
        _kept.pop(0)
    return t * 2, torch.full((64,), float(t[0]))
)"));
    return session.Eval("work");
  });
  std::mutex ring_mu;
  std::vector<at::Tensor> ring(64);  // results dropped later, by other threads
  std::atomic<bool> stop{false};
  std::atomic<int64_t> calls{0}, failures{0};
  auto run = [&](int thread) {
    for (int64_t i = 0; !stop.load(); ++i) {
      at::Tensor x = at::full({256}, static_cast<double>(i % 100));
      StatusOr<c10::IValue> out = work.Call({x});
      if (!out.ok()) {
        ++failures;
        continue;
      }
      auto elements = out->toTupleRef().elements();
      if (!at::equal(elements[0].toTensor(), x * 2) ||
          elements[1].toTensor()[0].item<double>() != i % 100) {
        ++failures;
      }
      std::lock_guard<std::mutex> lock(ring_mu);
      ring[(thread * 7 + i) % ring.size()] = elements[1].toTensor();
      ++calls;
    }
  };
  auto run_for = [&](std::chrono::seconds duration) {
    stop = false;
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) threads.emplace_back(run, t);
    std::this_thread::sleep_for(duration);
    stop = true;
    for (auto& thread : threads) thread.join();
  };
  run_for(std::chrono::seconds(5));  // warm-up: allocator pools, caches
  ASSERT_OK_AND_ASSIGN(const double warm_mib, ResidentMiB());
  const int64_t warm_calls = calls.load();
  run_for(std::chrono::seconds(30));
  ASSERT_OK_AND_ASSIGN(const double end_mib, ResidentMiB());
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(calls.load() - warm_calls, 1000);
  // Every call allocates about 3 KiB that crosses twice: a leak of one object
  // per call would grow by far more than this over the run.
  std::printf("stress: %lld calls in 30 s, RSS %.1f -> %.1f MiB\n",
              static_cast<long long>(calls.load() - warm_calls), warm_mib, end_mib);
  EXPECT_LT(end_mib - warm_mib, 20.0) << warm_mib << " MiB -> " << end_mib << " MiB after "
                                      << calls.load() - warm_calls << " calls";
}

// Managers come and go in one process: each gets fresh interpreters, torch's
// Python registrations are made again, and nothing temporary is left behind.
TEST(InterpreterLifecycleTest, SequentialManagersAndCleanShutdown) {
  const std::string cache = "test-cache/lifecycle";
  ASSERT_EQ(std::system(("rm -rf " + cache).c_str()), 0);
  for (int round = 0; round < 2; ++round) {
    auto manager = CreateManager(2, cache);
    ASSERT_OK(manager);
    for (int i = 0; i < 2; ++i) {
      InterpreterSession session = (*manager)->Acquire(i);
      ASSERT_OK_AND_ASSIGN(
          Object meta,
          session.Eval("(lambda torch: tuple(torch.ops.prims.convert_element_type(torch.ones(2), "
                       "torch.float64).shape))(__import__('torch'))"));
      ASSERT_OK_AND_ASSIGN(c10::IValue meta_value, meta.ToIValue());
      EXPECT_EQ(meta_value.toTupleRef().elements()[0].toInt(), 2);
    }
  }
  for (const std::string& file : ListFilesRecursively(cache)) {
    EXPECT_EQ(file.find(".tmp-"), std::string::npos) << file;
  }
}

}  // namespace
}  // namespace chorus::testing
