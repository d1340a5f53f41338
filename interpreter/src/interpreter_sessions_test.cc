// Calls in an interpreter session: values and strings crossing both ways,
// Python errors and deadlines, ReplicatedObject's concurrent callers, and how
// AcquireOne picks an interpreter.
#include "chorus/interpreter/interpreter_manager.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "chorus/common/status_matchers.h"
#include "interpreter/src/interpreter_test_support.h"

namespace chorus::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

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

// The watchdog sleeps until the earliest deadline armed; a later call's
// earlier deadline must wake it.
TEST_F(InterpreterTest, AnEarlierDeadlineIsKeptWhileALaterOneIsArmed) {
  const char* code = R"(
import time

def busy(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return 1

def spin_forever():
    while True:
        pass
)";
  std::thread long_call([&] {
    InterpreterSession first = manager().Acquire(0);
    ASSERT_OK(first.Exec(code));
    ASSERT_OK_AND_ASSIGN(Object busy, first.Eval("busy"));
    // Armed first, for a minute: the watchdog sleeps until then.
    StatusOr<Object> done = busy.Call({1.5}, {}, {steady_clock::now() + std::chrono::seconds(60)});
    EXPECT_OK(done.status());
  });
  std::this_thread::sleep_for(milliseconds(300));
  InterpreterSession second = manager().Acquire(1);
  ASSERT_OK(second.Exec(code));
  ASSERT_OK_AND_ASSIGN(Object spin, second.Eval("spin_forever"));
  const auto start = steady_clock::now();
  StatusOr<Object> stopped = spin.Call({}, {}, {start + milliseconds(200)});
  const auto elapsed = steady_clock::now() - start;
  long_call.join();
  EXPECT_EQ(stopped.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(elapsed, milliseconds(200));
  EXPECT_LT(elapsed, milliseconds(5000));
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
  std::vector<std::set<int64_t>> used(kThreads + 1);
  // Interpreter 0 is reserved while the callers run, so they are served by
  // the others however their calls interleave; once it is not, a call is
  // served by it again (the idle one of lowest index): at least two serve,
  // whatever the machine's load.
  manager().SetReserved(0, true);
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
  manager().SetReserved(0, false);
  StatusOr<c10::IValue> after = counter.Call({at::full({3}, 1.0)});
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  used[kThreads].insert(after->toTupleRef().elements()[1].toInt());
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(used[kThreads], std::set<int64_t>{0});
  std::set<int64_t> all;
  for (const auto& s : used) all.insert(s.begin(), s.end());
  EXPECT_GE(all.size(), 2u);
  EXPECT_LE(factory_runs.load(), kInterpreters);
  EXPECT_EQ(factory_runs.load(), static_cast<int>(all.size()));
}

TEST_F(InterpreterTest, ReplicationFactoryRunsOncePerInterpreterWhileCallersRaceToIt) {
  // The factory sleeps, releasing the GIL, so the other callers on the same
  // interpreter arrive while it runs; they wait for its object. Its first
  // run fails: the next caller makes the object instead.
  std::atomic<int> factory_runs{0};
  ReplicatedObject slow = manager().Replicate([&](InterpreterSession& session) -> StatusOr<Object> {
    if (++factory_runs == 1) return UnavailableError("first run fails");
    return session.Eval(
        "(__import__('time').sleep(0.2), type('Echo', (), {'__call__': lambda self, x: x})())[1]");
  });
  StatusOr<c10::IValue> first = slow.Call({at::ones({2})}, {}, CallOptions{.interpreter = 1});
  EXPECT_EQ(first.status().code(), StatusCode::kUnavailable);
  constexpr int kThreads = 4;
  std::atomic<int> answered{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      StatusOr<c10::IValue> out = slow.Call({at::ones({2})}, {}, CallOptions{.interpreter = 1});
      if (out.ok() && at::equal(out->toTensor(), at::ones({2}))) ++answered;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(answered.load(), kThreads);
  EXPECT_EQ(factory_runs.load(), 2);
}

TEST_F(InterpreterTest, AcquireOneAvoidsReservedInterpretersUntilAllAreReserved) {
  // A session holds its interpreter's GIL on the calling thread, so a thread
  // holds one session at a time here.
  auto acquire_one = [&] { return manager().AcquireOne().index(); };
  manager().SetReserved(0, true);
  manager().SetReserved(2, true);
  // The first idle unreserved one, again and again (its caches stay warm).
  std::set<int> idle_choices;
  for (int i = 0; i < 2 * kInterpreters; ++i) idle_choices.insert(acquire_one());
  EXPECT_EQ(idle_choices, (std::set<int>{1}));
  {
    // Held until released, not for a while: a loaded machine cannot end it early.
    std::atomic<bool> release{false};
    std::thread holder([&] {
      InterpreterSession held = manager().Acquire(1);
      while (!release.load()) std::this_thread::yield();
    });
    while (manager().Stats()[1].sessions == 0) std::this_thread::yield();
    EXPECT_EQ(acquire_one(), 3);  // the next idle unreserved one
    release = true;
    holder.join();
  }

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
  EXPECT_EQ(all_reserved_choices, (std::set<int>{0}));  // reserved, but every one is
  for (int i = 0; i < kInterpreters; ++i) manager().SetReserved(i, false);
}

}  // namespace
}  // namespace chorus::testing
