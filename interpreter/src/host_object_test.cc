// HostObject: C++ objects Python code holds as _chorus.HostObject and calls
// methods of (arguments and results, errors, releasing the GIL, lifetime,
// the way back into C++).
#include "chorus/interpreter/host_object.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "chorus/common/status_matchers.h"
#include "interpreter/src/interpreter_test_support.h"

namespace chorus::testing {
namespace {

using Args = std::vector<c10::IValue>;

std::vector<std::string> Strings(const c10::IValue& list) {
  std::vector<std::string> strings;
  for (const c10::IValue& item : list.toListRef()) strings.push_back(item.toStringRef());
  return strings;
}

// A counter Python adds to; also what the conversions deliver, and a method
// that waits for another Python thread of the same interpreter.
class Counter : public HostObject {
 public:
  explicit Counter(std::atomic<bool>* destroyed) : destroyed_(destroyed) {}
  ~Counter() override { destroyed_->store(true); }

  const char* type_name() const override { return "Counter"; }
  const std::vector<Method>& methods() const override {
    static const std::vector<Method> kMethods = {
        Bind<Counter>("add", false,
                      [](Counter& self, Args& args) -> StatusOr<c10::IValue> {
                        if (args.size() != 1 || !args[0].isInt()) {
                          return InvalidArgumentError("add() takes one int");
                        }
                        self.total_ += args[0].toInt();
                        return c10::IValue(self.total_);
                      }),
        // "<tensor sum>|<dict keys in order>|<list element type>"
        Bind<Counter>("describe", false,
                      [](Counter&, Args& args) -> StatusOr<c10::IValue> {
                        std::string keys;
                        for (const auto& entry : args[1].toGenericDict()) {
                          keys += entry.key().toStringRef();
                        }
                        return c10::IValue(
                            std::to_string(args[0].toTensor().sum().item<int64_t>()) + "|" + keys +
                            "|" + args[2].toList().elementType()->str());
                      }),
        Bind<Counter>("doubled", false,
                      [](Counter&, Args& args) -> StatusOr<c10::IValue> {
                        return c10::IValue(args[0].toTensor() * 2);
                      }),
        Bind<Counter>("fail", false,
                      [](Counter&, Args&) -> StatusOr<c10::IValue> {
                        return NotFoundError("no such entry 17");
                      }),
        Bind<Counter>("throw", false,
                      [](Counter&, Args&) -> StatusOr<c10::IValue> {
                        TORCH_CHECK(false, "checked 18");
                        return c10::IValue();
                      }),
        // Waits (GIL released) until signal() was called from another thread.
        Bind<Counter>("wait_for_signal", true,
                      [](Counter& self, Args&) -> StatusOr<c10::IValue> {
                        const auto limit =
                            std::chrono::steady_clock::now() + std::chrono::seconds(10);
                        while (!self.signalled_.load()) {
                          if (std::chrono::steady_clock::now() > limit) {
                            return DeadlineExceededError("no signal");
                          }
                          std::this_thread::sleep_for(std::chrono::milliseconds(1));
                        }
                        return c10::IValue(true);
                      }),
        Bind<Counter>("signal", false,
                      [](Counter& self, Args&) -> StatusOr<c10::IValue> {
                        self.signalled_.store(true);
                        return c10::IValue();
                      }),
    };
    return kMethods;
  }

 private:
  std::atomic<bool>* destroyed_;
  int64_t total_ = 0;
  std::atomic<bool> signalled_{false};
};

TEST_F(InterpreterTest, HostObjectMethodsTakeAndGiveBackPythonValues) {
  std::atomic<bool> destroyed{false};
  InterpreterSession session = manager().AcquireOne();
  ASSERT_OK(session.Exec(R"(
def use_counter(counter):
    return (type(counter).__name__, counter.add(2), counter.add(40),
            counter.describe(torch.arange(4), {'b': 1, 'a': 2}, [1.5, 2.5]),
            counter.doubled(torch.ones(3)).tolist(), sorted(dir(counter))[:3],
            repr(counter).startswith('<chorus Counter'))
)"));
  ASSERT_OK_AND_ASSIGN(Object use, session.Eval("use_counter"));
  ASSERT_OK_AND_ASSIGN(Object used,
                       use.Call({HostObjectValue(c10::make_intrusive<Counter>(&destroyed))}));
  ASSERT_OK_AND_ASSIGN(c10::IValue result, used.ToIValue());
  const std::vector<c10::IValue> items = result.toTupleRef().elements().vec();
  EXPECT_EQ(items[0].toStringRef(), "HostObject");
  EXPECT_EQ(items[1].toInt(), 2);
  EXPECT_EQ(items[2].toInt(), 42);
  EXPECT_EQ(items[3].toStringRef(), "6|ba|float");
  EXPECT_EQ(items[4].toDoubleVector(), std::vector<double>({2.0, 2.0, 2.0}));
  EXPECT_EQ(Strings(items[5]), std::vector<std::string>({"add", "describe", "doubled"}));
  EXPECT_TRUE(items[6].toBool());
  EXPECT_TRUE(destroyed.load());  // Python held the last reference, and let go
}

TEST_F(InterpreterTest, HostObjectErrorsAreRuntimeErrorsAndUnknownNamesAttributeErrors) {
  std::atomic<bool> destroyed{false};
  InterpreterSession session = manager().AcquireOne();
  ASSERT_OK(session.Exec(R"(
def errors_of(counter):
    found = []
    for call in (lambda: counter.fail(), lambda: counter.throw(), lambda: counter.add('x'),
                 lambda: counter.add(amount=1), lambda: counter.missing,
                 lambda: counter.add(2 ** 70)):
        try:
            call()
            found.append('none')
        except Exception as e:
            found.append(type(e).__name__ + ': ' + str(e))
    return found
)"));
  ASSERT_OK_AND_ASSIGN(Object errors_of, session.Eval("errors_of"));
  ASSERT_OK_AND_ASSIGN(Object found,
                       errors_of.Call({HostObjectValue(c10::make_intrusive<Counter>(&destroyed))}));
  ASSERT_OK_AND_ASSIGN(c10::IValue value, found.ToIValue());
  const std::vector<std::string> errors = Strings(value);
  ASSERT_EQ(errors.size(), 6u);
  EXPECT_EQ(errors[0], "RuntimeError: no such entry 17");
  EXPECT_NE(errors[1].find("RuntimeError: checked 18"), std::string::npos) << errors[1];
  EXPECT_EQ(errors[2], "RuntimeError: add() takes one int");
  EXPECT_EQ(errors[3], "TypeError: Counter.add() takes no keyword arguments");
  EXPECT_NE(errors[4].find("AttributeError"), std::string::npos) << errors[4];
  EXPECT_NE(errors[5].find("OverflowError"), std::string::npos) << errors[5];
}

TEST_F(InterpreterTest, HostObjectMethodThatReleasesTheGilLetsOtherThreadsRun) {
  std::atomic<bool> destroyed{false};
  InterpreterSession session = manager().AcquireOne();
  // signal() needs the GIL while wait_for_signal() waits on this thread: it
  // returns True only if the wait released it.
  ASSERT_OK(session.Exec(R"(
import threading
def wait_then_signal(counter):
    signaller = threading.Timer(0.05, counter.signal)
    signaller.start()
    waited = counter.wait_for_signal()
    signaller.join()
    return waited
)"));
  ASSERT_OK_AND_ASSIGN(Object wait, session.Eval("wait_then_signal"));
  ASSERT_OK_AND_ASSIGN(Object waited,
                       wait.Call({HostObjectValue(c10::make_intrusive<Counter>(&destroyed))}));
  ASSERT_OK_AND_ASSIGN(c10::IValue value, waited.ToIValue());
  EXPECT_TRUE(value.toBool());
}

TEST_F(InterpreterTest, HostObjectLivesWhileAnyInterpreterHoldsItAndComesBackAsItself) {
  std::atomic<bool> destroyed{false};
  auto counter = c10::make_intrusive<Counter>(&destroyed);
  HostObject* const raw = counter.get();
  for (int i = 0; i < 2; ++i) {
    InterpreterSession session = manager().Acquire(i);
    ASSERT_OK(session.Exec("def keep(obj):\n    global kept\n    kept = obj\n    return obj"));
    ASSERT_OK_AND_ASSIGN(Object keep, session.Eval("keep"));
    ASSERT_OK_AND_ASSIGN(Object returned, keep.Call({HostObjectValue(counter)}));
    ASSERT_OK_AND_ASSIGN(c10::IValue back, returned.ToIValue());
    EXPECT_EQ(HostObjectOf(back), raw);  // the same C++ object, not a copy
  }
  EXPECT_EQ(HostObjectOf(c10::IValue(int64_t{1})), nullptr);
  counter.reset();
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(destroyed.load()) << "interpreter " << i << " still holds it";
    InterpreterSession session = manager().Acquire(i);
    ASSERT_OK(session.Exec("assert kept.add(1) >= 1\ndel kept"));
  }
  EXPECT_TRUE(destroyed.load());
}

}  // namespace
}  // namespace chorus::testing
