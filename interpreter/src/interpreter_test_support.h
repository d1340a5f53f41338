// Test support for interpreter_test: managers of N interpreters, and the
// InterpreterTest fixture, four interpreters with torch and numpy imported that
// the suite's tests (interpreter_*_test.cc) share.
#ifndef CHORUS_INTERPRETER_INTERPRETER_TEST_SUPPORT_H_
#define CHORUS_INTERPRETER_INTERPRETER_TEST_SUPPORT_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "chorus/common/status_matchers.h"
#include "chorus/interpreter/interpreter_manager.h"

namespace chorus::testing {

inline constexpr int kInterpreters = 4;
inline constexpr char kCacheDir[] = "test-cache/shared";

// A manager of `interpreters` with its library cache in `cache_dir`.
inline StatusOr<std::unique_ptr<InterpreterManager>> CreateManager(int interpreters,
                                                                   const std::string& cache_dir) {
  InterpreterManagerOptions options;
  options.num_interpreters = interpreters;
  options.cache_dir = cache_dir;
  return InterpreterManager::Create(options);
}

// One manager with four interpreters shared by the tests of this suite, in
// every file: creating one imports torch four times.
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

  inline static InterpreterManager* manager_ = nullptr;
};

}  // namespace chorus::testing

#endif  // CHORUS_INTERPRETER_INTERPRETER_TEST_SUPPORT_H_
