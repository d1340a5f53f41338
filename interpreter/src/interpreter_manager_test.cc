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
#include <cstring>
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

namespace chorus {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr int kInterpreters = 4;
constexpr char kCacheDir[] = "test-cache/shared";

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

// A manager of `interpreters` with its library cache in `cache_dir`.
StatusOr<std::unique_ptr<InterpreterManager>> CreateManager(int interpreters,
                                                            const std::string& cache_dir) {
  InterpreterManagerOptions options;
  options.num_interpreters = interpreters;
  options.cache_dir = cache_dir;
  return InterpreterManager::Create(options);
}

// One manager with four interpreters shared by the tests of this file:
// creating one imports torch four times.
class InterpreterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    InterpreterManagerOptions options;
    options.num_interpreters = kInterpreters;
    options.cache_dir = kCacheDir;
    options.preload_modules = {"torch", "numpy"};
    auto created = InterpreterManager::Create(options);
    ASSERT_OK(created);
    manager_ = std::move(created).value().release();
    // Tests run alone (one process per test under CTest) or together; each
    // finds torch imported in every interpreter's __main__.
    for (int i = 0; i < kInterpreters; ++i) {
      InterpreterSession session = manager_->Acquire(i);
      ASSERT_TRUE(session.Exec("import torch").ok());
    }
  }
  static void TearDownTestSuite() {
    delete manager_;
    manager_ = nullptr;
  }
  InterpreterManager& manager() { return *manager_; }

  static InterpreterManager* manager_;
};

InterpreterManager* InterpreterTest::manager_ = nullptr;

TEST_F(InterpreterTest, GlobalsAndModulesAreIsolated) {
  ASSERT_EQ(manager().size(), kInterpreters);
  {
    InterpreterSession s0 = manager().Acquire(0);
    ASSERT_TRUE(s0.Exec("isolation_marker = 42").ok());
  }
  std::set<int64_t> modules_ids;
  for (int i = 0; i < kInterpreters; ++i) {
    InterpreterSession session = manager().Acquire(i);
    EXPECT_EQ(session.index(), i);
    ASSERT_OK_AND_ASSIGN(Object has_marker, session.Eval("'isolation_marker' in globals()"));
    ASSERT_OK_AND_ASSIGN(c10::IValue has_marker_value, has_marker.ToIValue());
    EXPECT_EQ(has_marker_value.toBool(), i == 0) << "interpreter " << i;
    ASSERT_OK_AND_ASSIGN(Object index, session.Eval("__import__('chorus').interpreter_index()"));
    ASSERT_OK_AND_ASSIGN(c10::IValue index_value, index.ToIValue());
    EXPECT_EQ(index_value.toInt(), i);
    // Each interpreter has its own sys.modules, and its own torch module object.
    ASSERT_OK_AND_ASSIGN(
        Object ids,
        session.Eval(
            "(id(__import__('sys').modules), id(__import__('torch')), id(__import__('numpy')))"));
    ASSERT_OK_AND_ASSIGN(c10::IValue tuple, ids.ToIValue());
    for (const c10::IValue& id : tuple.toTupleRef().elements()) modules_ids.insert(id.toInt());
  }
  EXPECT_EQ(modules_ids.size(), 3u * kInterpreters);
}

TEST_F(InterpreterTest, EveryInterpreterRunsTorchAndNumpyLikeTheHost) {
  at::manual_seed(7);
  at::Tensor w1 = at::randn({16, 8}), b1 = at::randn({16});
  at::Tensor w2 = at::randn({4, 16}), b2 = at::randn({4});
  at::Tensor x = at::randn({5, 8});
  at::Tensor expected = at::linear(at::relu(at::linear(x, w1, b1)), w2, b2);

  for (int i = 0; i < kInterpreters; ++i) {
    InterpreterSession session = manager().Acquire(i);
    ASSERT_TRUE(session
                    .Exec(R"(
import numpy as np
import torch

def sequential_forward(w1, b1, w2, b2, x):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    with torch.no_grad():
        for param, value in zip(model.parameters(), (w1, b1, w2, b2)):
            param.copy_(value)
        return model(x)

numpy_total = float(np.arange(10, dtype=np.float64).sum())
)")
                    .ok());
    ASSERT_OK_AND_ASSIGN(Object forward, session.Eval("sequential_forward"));
    ASSERT_OK_AND_ASSIGN(Object out, forward.Call({w1, b1, w2, b2, x}));
    ASSERT_OK_AND_ASSIGN(c10::IValue out_value, out.ToIValue());
    at::Tensor result = out_value.toTensor();
    EXPECT_TRUE(at::allclose(result, expected, 1e-5, 1e-6)) << "interpreter " << i;
    ASSERT_OK_AND_ASSIGN(Object total, session.Eval("numpy_total"));
    ASSERT_OK_AND_ASSIGN(c10::IValue total_value, total.ToIValue());
    EXPECT_EQ(total_value.toDouble(), 45.0);
  }
}

TEST_F(InterpreterTest, OpDefinedWithTorchLibraryInOneInterpreterIsCallableFromAnother) {
  const char* kDefine = R"(
import torch
scale_lib = torch.library.Library("chorus_test", "DEF")
scale_lib.define("scale_add(Tensor x, float alpha) -> Tensor")
def scale_add(x, alpha):
    return x * alpha + 1
scale_lib.impl("scale_add", scale_add, "CompositeExplicitAutograd")
)";
  {
    InterpreterSession s0 = manager().Acquire(0);
    Status defined = s0.Exec(kDefine);
    ASSERT_OK(defined);
  }
  InterpreterSession s2 = manager().Acquire(2);
  ASSERT_OK_AND_ASSIGN(
      Object result,
      s2.Eval("torch.ops.chorus_test.scale_add(torch.arange(3, dtype=torch.float32), 2.0)"));
  ASSERT_OK_AND_ASSIGN(c10::IValue result_value, result.ToIValue());
  at::Tensor tensor = result_value.toTensor();
  EXPECT_TRUE(at::equal(tensor, at::tensor({1.0f, 3.0f, 5.0f})));
  // The same model code run in another interpreter defines nothing twice and
  // raises nothing: the namespace, schema and kernel stay interpreter 0's.
  Status again = s2.Exec(kDefine);
  EXPECT_OK(again);
  ASSERT_OK_AND_ASSIGN(Object owner,
                       s2.Eval("float(torch.ops.chorus_test.scale_add(torch.ones(1), 10.0)[0])"));
  ASSERT_OK_AND_ASSIGN(c10::IValue owner_value, owner.ToIValue());
  EXPECT_EQ(owner_value.toDouble(), 11.0);
}

TEST_F(InterpreterTest, TorchsOwnPythonKernelsWorkInEveryInterpreter) {
  // Meta kernels come from torch/_meta_registrations.py, registered by
  // whichever interpreter imported torch first.
  for (int i = 0; i < kInterpreters; ++i) {
    InterpreterSession session = manager().Acquire(i);
    ASSERT_OK_AND_ASSIGN(
        Object shape,
        session.Eval(
            "list(torch.empty(3, 4, device='meta').mm(torch.empty(4, 5, device='meta')).shape)"));
    ASSERT_OK_AND_ASSIGN(c10::IValue shape_value, shape.ToIValue());
    auto dims = shape_value.toIntVector();
    EXPECT_EQ(dims, (std::vector<int64_t>{3, 5})) << "interpreter " << i;
  }
}

TEST_F(InterpreterTest, HostTensorMutatedInPlaceIsSeenByHostAndUsableElsewhere) {
  at::Tensor host = at::zeros({4});
  {
    InterpreterSession s1 = manager().Acquire(1);
    ASSERT_OK_AND_ASSIGN(Object bump, s1.Eval("lambda t: t.add_(1)"));
    ASSERT_OK_AND_ASSIGN(Object returned, bump.Call({host}));
    ASSERT_OK_AND_ASSIGN(c10::IValue returned_value, returned.ToIValue());
    at::Tensor back = returned_value.toTensor();
    // An alias: a different TensorImpl over the same memory.
    EXPECT_EQ(back.data_ptr(), host.data_ptr());
    EXPECT_NE(back.unsafeGetTensorImpl(), host.unsafeGetTensorImpl());
  }
  EXPECT_TRUE(at::equal(host, at::ones({4})));
  InterpreterSession s2 = manager().Acquire(2);
  ASSERT_OK_AND_ASSIGN(Object total, s2.Eval("lambda t: float(t.mul_(3).sum())"));
  ASSERT_OK_AND_ASSIGN(Object value, total.Call({host}));
  ASSERT_OK_AND_ASSIGN(c10::IValue sum, value.ToIValue());
  EXPECT_EQ(sum.toDouble(), 12.0);
  EXPECT_TRUE(at::equal(host, at::full({4}, 3.0f)));
}

TEST_F(InterpreterTest, TensorMadeInOneInterpreterCrossesToAnother) {
  at::Tensor made;
  {
    InterpreterSession s0 = manager().Acquire(0);
    ASSERT_OK_AND_ASSIGN(Object tensor, s0.Eval("torch.arange(6.0).reshape(2, 3)"));
    ASSERT_OK_AND_ASSIGN(c10::IValue value, tensor.ToIValue());
    made = value.toTensor();
  }
  InterpreterSession s3 = manager().Acquire(3);
  ASSERT_OK_AND_ASSIGN(Object transpose, s3.Eval("lambda t: t.t().contiguous()"));
  ASSERT_OK_AND_ASSIGN(Object transposed, transpose.Call({made}));
  ASSERT_OK_AND_ASSIGN(c10::IValue transposed_value, transposed.ToIValue());
  at::Tensor result = transposed_value.toTensor();
  EXPECT_TRUE(at::equal(result, at::arange(6.0).reshape({2, 3}).t()));
}

// torch hands back the Python object a storage already has: one storage
// reached from two interpreters (untyped_storage(), torch.save, deepcopy) must
// give each its own, over the same memory.
TEST_F(InterpreterTest, StorageReachedFromTwoInterpretersGivesEachItsOwnObject) {
  constexpr char kTouch[] = R"(
def touch(t):
    import copy, io
    storage = t.untyped_storage()
    buffer = io.BytesIO()
    torch.save(t, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    copied = copy.deepcopy(t)
    return (isinstance(storage, torch.UntypedStorage), storage.data_ptr(),
            bool(torch.equal(loaded, t)), bool(torch.equal(copied, t)), t)
)";
  at::Tensor host = at::arange(8.0);
  at::Tensor made;  // a tensor whose storage interpreter 0 wrapped first
  for (int i : {0, 1, 2, 0, 1}) {
    InterpreterSession session = manager().Acquire(i);
    ASSERT_TRUE(session.Exec(kTouch).ok());
    ASSERT_OK_AND_ASSIGN(Object touch, session.Eval("touch"));
    for (const at::Tensor& tensor : {host, made}) {
      if (!tensor.defined()) continue;
      ASSERT_OK_AND_ASSIGN(Object touched, touch.Call({tensor}));
      ASSERT_OK_AND_ASSIGN(c10::IValue result, touched.ToIValue());
      auto out = result.toTupleRef().elements();
      EXPECT_TRUE(out[0].toBool()) << "interpreter " << i << " got another interpreter's storage";
      EXPECT_EQ(out[1].toInt(), reinterpret_cast<int64_t>(tensor.data_ptr()));
      EXPECT_TRUE(out[2].toBool());
      EXPECT_TRUE(out[3].toBool());
      if (!made.defined()) made = out[4].toTensor();  // crossed back: still the same memory
    }
  }
  EXPECT_EQ(made.data_ptr(), host.data_ptr());
}

// Dispatch and function modes, the default device and saved-tensor hooks are
// thread-local in libtorch: one interpreter's must not reach another's code on
// the same thread (a session inside a session), and come back after it.
TEST_F(InterpreterTest, ModesSetInOneInterpreterAreInvisibleToAnotherOnTheSameThread) {
  constexpr char kState[] = R"(
def state():
    import torch.utils._python_dispatch as pd
    return (str(torch.ones(1).device), torch._C._len_torch_dispatch_stack(),
            torch._C._len_torch_function_stack())
)";
  InterpreterSession outer = manager().Acquire(0);
  ASSERT_TRUE(outer.Exec(kState).ok());
  ASSERT_TRUE(outer
                  .Exec(R"(
from torch.utils._python_dispatch import TorchDispatchMode
class Counting(TorchDispatchMode):
    calls = 0
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        Counting.calls += 1
        return func(*args, **(kwargs or {}))
_mode = Counting()
_mode.__enter__()
torch.set_default_device('meta')
_hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
_hooks.__enter__()
)")
                  .ok());
  ASSERT_OK_AND_ASSIGN(Object before_state, outer.Eval("state()"));
  ASSERT_OK_AND_ASSIGN(c10::IValue before_value, before_state.ToIValue());
  auto before = before_value.toTupleRef().elements();
  EXPECT_EQ(before[0].toStringRef(), "meta");
  EXPECT_EQ(before[1].toInt(), 1);
  {
    InterpreterSession inner = manager().Acquire(1);
    ASSERT_TRUE(inner.Exec(kState).ok());
    ASSERT_OK_AND_ASSIGN(Object seen_state, inner.Eval("state()"));
    ASSERT_OK_AND_ASSIGN(c10::IValue seen_value, seen_state.ToIValue());
    auto seen = seen_value.toTupleRef().elements();
    EXPECT_EQ(seen[0].toStringRef(), "cpu");
    EXPECT_EQ(seen[1].toInt(), 0);
    EXPECT_EQ(seen[2].toInt(), 0);
    ASSERT_OK_AND_ASSIGN(Object grad,
                         inner.Eval("(lambda x: (x * x).sum().backward() or "
                                    "float(x.grad.sum()))(torch.ones(3, requires_grad=True))"));
    ASSERT_OK_AND_ASSIGN(c10::IValue grad_value, grad.ToIValue());
    EXPECT_EQ(grad_value.toDouble(), 6.0);
  }
  ASSERT_OK_AND_ASSIGN(Object after_state, outer.Eval("state()"));
  ASSERT_OK_AND_ASSIGN(c10::IValue after_value, after_state.ToIValue());
  auto after = after_value.toTupleRef().elements();
  EXPECT_EQ(after[0].toStringRef(), "meta");
  EXPECT_EQ(after[1].toInt(), 1);
  ASSERT_OK_AND_ASSIGN(Object counted, outer.Eval("Counting.calls > 0"));
  ASSERT_OK_AND_ASSIGN(c10::IValue counted_value, counted.ToIValue());
  EXPECT_EQ(counted_value.toBool(), true);
  ASSERT_TRUE(outer
                  .Exec("_hooks.__exit__(None, None, None)\n"
                        "torch.set_default_device(None)\n"
                        "_mode.__exit__(None, None, None)")
                  .ok());
}

// torch.compile (inductor: C++ kernels built at run time and loaded by file
// path) in two interpreters at once, each matching eager.
TEST_F(InterpreterTest, TorchCompileRunsInTwoInterpretersAtOnce) {
  constexpr char kCompile[] = R"(
def compiled_matches_eager(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    compiled = torch.compile(model, backend="inductor")
    with torch.no_grad():
        return bool(torch.allclose(compiled(x), model(x), atol=1e-5)), float(compiled(x).sum())
)";
  std::vector<std::thread> threads;
  std::vector<Status> statuses(2);
  std::vector<bool> matches(2, false);
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      InterpreterSession session = manager().Acquire(i);
      statuses[i] = session.Exec(kCompile);
      if (!statuses[i].ok()) return;
      StatusOr<Object> run = session.Eval("compiled_matches_eager");
      StatusOr<Object> out = run.ok() ? run->Call({int64_t{i}}) : run;
      if (!out.ok()) {
        statuses[i] = out.status();
        return;
      }
      StatusOr<c10::IValue> value = out->ToIValue();
      matches[i] = value.ok() && value->toTupleRef().elements()[0].toBool();
    });
  }
  for (auto& thread : threads) thread.join();
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(statuses[i].ok()) << "interpreter " << i << ": " << statuses[i].ToString();
    EXPECT_TRUE(matches[i]) << "interpreter " << i;
  }
}

TEST_F(InterpreterTest, ValuesRoundTrip) {
  InterpreterSession session = manager().AcquireOne();
  ASSERT_OK_AND_ASSIGN(Object identity, session.Eval("lambda x: x"));
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("weights", at::ones({2}));
  dict.insert("name", std::string("mlp"));
  std::vector<c10::IValue> values = {
      c10::IValue(),
      true,
      int64_t{-(int64_t{1} << 40)},
      2.5,
      std::string("h\xc3\xa9llo"),
      c10::List<int64_t>({1, 2, 3}),
      c10::ivalue::Tuple::create({int64_t{1}, std::string("two"), 3.0}),
      dict,
  };
  for (const c10::IValue& value : values) {
    ASSERT_OK_AND_ASSIGN(Object returned, identity.Call({value}));
    ASSERT_OK_AND_ASSIGN(c10::IValue back, returned.ToIValue());
    if (value.isGenericDict()) {
      ASSERT_TRUE(back.isGenericDict());
      auto round = back.toGenericDict();
      EXPECT_TRUE(at::equal(round.at("weights").toTensor(), at::ones({2})));
      EXPECT_EQ(round.at("name").toStringRef(), "mlp");
    } else {
      EXPECT_EQ(back, value) << value.tagKind();
    }
  }
  // Keyword arguments, and lists that come back typed.
  ASSERT_OK_AND_ASSIGN(
      Object make,
      session.Eval("lambda n, scale=1: [torch.full((1,), scale * i) for i in range(n)]"));
  ASSERT_OK_AND_ASSIGN(Object made, make.Call({int64_t{3}}, {{"scale", 2.0}}));
  ASSERT_OK_AND_ASSIGN(c10::IValue tensors, made.ToIValue());
  ASSERT_TRUE(tensors.isTensorList());
  EXPECT_EQ(tensors.toTensorVector()[2].item<double>(), 4.0);
}

TEST_F(InterpreterTest, StringsCrossAsStrWhateverTheirBytes) {
  InterpreterSession session = manager().AcquireOne();
  // Bytes that are not UTF-8 arrive as lone surrogates and go back unchanged;
  // a returned bytes object becomes a string too.
  const std::string raw("ok\xff\x00", 4);
  ASSERT_OK_AND_ASSIGN(Object describe,
                       session.Eval("lambda s: (type(s).__name__, len(s), s.upper(), "
                                    "s.encode('utf-8', 'surrogateescape'))"));
  ASSERT_OK_AND_ASSIGN(Object described, describe.Call({raw}));
  ASSERT_OK_AND_ASSIGN(c10::IValue back, described.ToIValue());
  const auto& items = back.toTupleRef().elements();
  EXPECT_EQ(items[0].toStringRef(), "str");
  EXPECT_EQ(items[1].toInt(), 4);
  EXPECT_EQ(items[2].toStringRef(), std::string("OK\xff\x00", 4));
  EXPECT_EQ(items[3].toStringRef(), raw);
}

TEST_F(InterpreterTest, UnconvertibleValuesAreClearErrors) {
  InterpreterSession session = manager().AcquireOne();
  ASSERT_OK_AND_ASSIGN(Object obj, session.Eval("object()"));
  StatusOr<c10::IValue> converted = obj.ToIValue();
  ASSERT_FALSE(converted.ok());
  EXPECT_NE(converted.status().message().find("cannot convert a Python object"), std::string::npos)
      << converted.status().message();
  ASSERT_OK_AND_ASSIGN(Object huge, session.Eval("2 ** 70"));
  EXPECT_FALSE(huge.ToIValue().ok());
  ASSERT_OK_AND_ASSIGN(Object two, session.Eval("1 + 1"));
  ASSERT_OK_AND_ASSIGN(c10::IValue two_value, two.ToIValue());
  EXPECT_EQ(two_value.toInt(), 2);
}

struct ErrorCase {
  const char* code;  // statements run with Exec
  const char* type;
  const char* message;
};

TEST_F(InterpreterTest, PythonErrorsCarryTypeMessageTracebackAndLeaveTheInterpreterUsable) {
  const ErrorCase cases[] = {
      {"def fail():\n    raise ValueError('bad value 17')\nfail()", "ValueError", "bad value 17"},
      {"def broken(:\n    pass", "SyntaxError", "invalid syntax"},
      {"import chorus_no_such_module", "ModuleNotFoundError", "chorus_no_such_module"},
      {"import sys\nsys.exit(3)", "SystemExit", "3"},
      {"raise KeyboardInterrupt()", "KeyboardInterrupt", ""},
  };
  for (int i = 0; i < kInterpreters; ++i) {
    InterpreterSession session = manager().Acquire(i);
    for (const ErrorCase& error : cases) {
      Status status = session.Exec(error.code);
      ASSERT_FALSE(status.ok()) << error.code;
      EXPECT_EQ(status.code(), StatusCode::kInternal);
      ASSERT_NE(status.python_error(), nullptr) << status.ToString();
      EXPECT_EQ(status.python_error()->type, error.type);
      EXPECT_NE(status.python_error()->message.find(error.message), std::string::npos)
          << status.python_error()->message;
      EXPECT_NE(status.python_error()->traceback.find(error.type), std::string::npos)
          << status.python_error()->traceback;
      // The interpreter serves the next call.
      ASSERT_OK_AND_ASSIGN(Object next, session.Eval("6 * 7"));
      ASSERT_OK_AND_ASSIGN(c10::IValue next_value, next.ToIValue());
      EXPECT_EQ(next_value.toInt(), 42);
    }
  }
}

TEST_F(InterpreterTest, CallPastItsDeadlineIsInterruptedAndTheInterpreterServesAgain) {
  InterpreterSession session = manager().Acquire(1);
  ASSERT_TRUE(session
                  .Exec(R"(
def spin_forever():
    while True:
        try:
            pass
        except Exception:  # a deadline is not an Exception: it gets through
            pass

def quick(x):
    return x + 1
)")
                  .ok());
  ASSERT_OK_AND_ASSIGN(Object spin, session.Eval("spin_forever"));
  ASSERT_OK_AND_ASSIGN(Object quick, session.Eval("quick"));
  for (int round = 0; round < 3; ++round) {
    auto start = steady_clock::now();
    StatusOr<Object> stopped = spin.Call({}, {}, {start + milliseconds(200)});
    auto elapsed = steady_clock::now() - start;
    ASSERT_FALSE(stopped.ok());
    EXPECT_EQ(stopped.status().code(), StatusCode::kDeadlineExceeded);
    EXPECT_EQ(stopped.status().python_error()->type, "chorus.DeadlineExceeded");
    EXPECT_GE(elapsed, milliseconds(200));
    EXPECT_LT(elapsed, milliseconds(5000));
    // Calls with deadlines that finish in time are untouched, and no stale
    // interrupt reaches the next call.
    for (int i = 0; i < 20; ++i) {
      ASSERT_OK_AND_ASSIGN(
          Object next, quick.Call({int64_t{i}}, {}, {steady_clock::now() + milliseconds(1000)}));
      ASSERT_OK_AND_ASSIGN(c10::IValue next_value, next.ToIValue());
      EXPECT_EQ(next_value.toInt(), i + 1);
    }
  }
  StatusOr<Object> late = quick.Call({int64_t{1}}, {}, {steady_clock::now() - milliseconds(1)});
  EXPECT_EQ(late.status().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(InterpreterTest, ReplicatedObjectServesConcurrentCallersOnManyInterpreters) {
  std::atomic<int> factory_runs{0};
  ReplicatedObject counter = manager().Replicate([&](InterpreterSession& session) {
    ++factory_runs;
    return session.Eval(R"((lambda: (
        __import__('torch'),
        type('Scaler', (), {
            '__call__': lambda self, x: (x * 2, __import__('chorus').interpreter_index())
        })())[1])())");
  });
  constexpr int kThreads = 4, kCalls = 40;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  std::vector<std::set<int64_t>> used(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        at::Tensor x = at::full({3}, static_cast<double>(i));
        StatusOr<c10::IValue> out = counter.Call({x});
        if (!out.ok()) {
          ++failures;
          continue;
        }
        auto elements = out->toTupleRef().elements();
        if (!at::equal(elements[0].toTensor(), x * 2)) ++failures;
        used[t].insert(elements[1].toInt());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  std::set<int64_t> all;
  for (const auto& s : used) all.insert(s.begin(), s.end());
  EXPECT_GE(all.size(), 2u);
  EXPECT_LE(factory_runs.load(), kInterpreters);
  EXPECT_EQ(factory_runs.load(), static_cast<int>(all.size()));
}

TEST_F(InterpreterTest, AcquireOneAvoidsReservedInterpretersUntilAllAreReserved) {
  // A session holds its interpreter's GIL on the calling thread, so a thread
  // holds one session at a time here.
  auto acquire_one = [&] { return manager().AcquireOne().index(); };
  manager().SetReserved(0, true);
  manager().SetReserved(2, true);
  std::set<int> idle_choices;
  for (int i = 0; i < 2 * kInterpreters; ++i) idle_choices.insert(acquire_one());
  EXPECT_EQ(idle_choices, (std::set<int>{1, 3}));

  // Both unreserved ones busy: still one of them (the least busy), not an idle reserved one.
  std::vector<std::thread> holders;
  for (int index : {1, 3}) {
    holders.emplace_back([&, index] {
      InterpreterSession held = manager().Acquire(index);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    });
  }
  while (manager().Stats()[1].sessions == 0 || manager().Stats()[3].sessions == 0) {
    std::this_thread::yield();
  }
  const int busy_choice = acquire_one();  // waits for a holder to finish
  for (auto& holder : holders) holder.join();
  EXPECT_TRUE(busy_choice == 1 || busy_choice == 3) << busy_choice;

  for (int i = 0; i < kInterpreters; ++i) manager().SetReserved(i, true);
  std::set<int> all_reserved_choices;
  for (int i = 0; i < kInterpreters; ++i) all_reserved_choices.insert(acquire_one());
  EXPECT_EQ(all_reserved_choices.size(), static_cast<size_t>(kInterpreters));
  for (int i = 0; i < kInterpreters; ++i) manager().SetReserved(i, false);
}

TEST_F(InterpreterTest, InstalledModulesImportInEveryInterpreter) {
  // Standard-library C extensions (lib-dynload), numpy, torch, torchvision.
  const char* kCheck = R"(
import ctypes, decimal, hashlib, json, sqlite3, ssl, zoneinfo
import numpy, torch, torchvision
torch.manual_seed(0)
_resnet = torchvision.models.resnet18(num_classes=10).eval()
with torch.no_grad():
    resnet_shape = list(_resnet(torch.randn(1, 3, 32, 32)).shape)
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
    ASSERT_OK_AND_ASSIGN(Object resnet_shape, session.Eval("resnet_shape"));
    ASSERT_OK_AND_ASSIGN(c10::IValue resnet_shape_value, resnet_shape.ToIValue());
    EXPECT_EQ(resnet_shape_value.toIntVector(), (std::vector<int64_t>{1, 10}));
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
  // No copy of their extensions is mapped: each mapped copy's `source` file
  // (beside it in the cache) names the file it copies.
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
}  // namespace chorus
