// Four interpreters in one process: each has its own globals and modules and
// runs torch and numpy like the host, while ops, tensors, storages and thread-local
// modes cross between them as they should; torch.compile in two at once.
#include "chorus/interpreter/interpreter_manager.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "chorus/common/status_matchers.h"
#include "interpreter/src/interpreter_test_support.h"

namespace chorus::testing {
namespace {

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

// Each interpreter's main thread (the one CPython finalizes it on) is its home
// thread, alive and parked, not the thread that opened a session.
TEST_F(InterpreterTest, MainThreadIsTheInterpretersLiveHomeThread) {
  std::set<int64_t> main_threads;
  for (int i = 0; i < kInterpreters; ++i) {
    InterpreterSession session = manager().Acquire(i);
    ASSERT_OK_AND_ASSIGN(Object seen, session.Eval(R"((
        __import__('threading').main_thread().is_alive(),
        __import__('threading').main_thread() is __import__('threading').current_thread(),
        __import__('threading').main_thread().ident))"));
    ASSERT_OK_AND_ASSIGN(c10::IValue value, seen.ToIValue());
    const auto& elements = value.toTupleRef().elements();
    EXPECT_TRUE(elements[0].toBool()) << "interpreter " << i;
    EXPECT_FALSE(elements[1].toBool()) << "interpreter " << i;
    main_threads.insert(elements[2].toInt());
  }
  EXPECT_EQ(main_threads.size(), static_cast<size_t>(kInterpreters));
}

TEST_F(InterpreterTest, TritonsPythonBackendModuleIsImportableInEveryInterpreter) {
  for (int i = 0; i < kInterpreters; ++i) {
    InterpreterSession session = manager().Acquire(i);
    ASSERT_OK_AND_ASSIGN(Object names, session.Eval(R"((
        __import__('triton_python_backend_utils').Tensor.__module__,
        __import__('c_python_backend_utils').__name__))"));
    ASSERT_OK_AND_ASSIGN(c10::IValue value, names.ToIValue());
    const auto& elements = value.toTupleRef().elements();
    EXPECT_EQ(elements[0].toStringRef(), "chorus.triton.tensor") << "interpreter " << i;
    EXPECT_EQ(elements[1].toStringRef(), "chorus.triton.c_utils") << "interpreter " << i;
  }
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

// numpy in every interpreter at once: its import guard (numpy refuses a
// subinterpreter; each of chorus' is a main one), its C API (torch's bridge
// must reach this interpreter's numpy, whose ndarray type is its own), and
// torch.from_numpy / .numpy() sharing memory both ways, while the others run.
TEST_F(InterpreterTest, NumpyRunsInEveryInterpreterAtOnceThroughItsOwnCApi) {
  constexpr char kNumpy[] = R"(
import numpy as np
import torch

def numpy_round_trip(seed, rounds):
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        array = rng.standard_normal((64, 32))
        tensor = torch.from_numpy(array)  # a view of numpy's memory
        tensor.mul_(2.0)
        back = (tensor @ tensor.T).numpy()  # torch's memory, as this numpy's ndarray
        if (type(back) is not np.ndarray or not np.shares_memory(tensor.numpy(), array)
                or not np.allclose(back, array @ array.T)):
            return (False, np.__version__)
    return (True, np.__version__)
)";
  std::vector<std::thread> threads;
  std::vector<Status> statuses(kInterpreters);
  std::vector<c10::IValue> results(kInterpreters);
  for (int i = 0; i < kInterpreters; ++i) {
    threads.emplace_back([&, i] {
      InterpreterSession session = manager().Acquire(i);
      statuses[i] = session.Exec(kNumpy);
      StatusOr<Object> run =
          statuses[i].ok() ? session.Eval("numpy_round_trip") : StatusOr<Object>(statuses[i]);
      StatusOr<Object> out = run.ok() ? run->Call({int64_t{i}, int64_t{200}}) : run;
      StatusOr<c10::IValue> value = out.ok() ? out->ToIValue() : out.status();
      if (value.ok()) {
        results[i] = *value;
      } else {
        statuses[i] = value.status();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int i = 0; i < kInterpreters; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << "interpreter " << i << ": " << statuses[i].ToString();
    auto out = results[i].toTupleRef().elements();
    EXPECT_TRUE(out[0].toBool()) << "interpreter " << i << ", numpy " << out[1].toStringRef();
  }
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

}  // namespace
}  // namespace chorus::testing
