#include "chorus/interpreter/interpreter_manager.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace chorus {
namespace {

TEST(Smoke, TwoInterpreters) {
  InterpreterManagerOptions options;
  options.num_interpreters = 2;
  options.cache_dir = "test-cache";
  auto manager = InterpreterManager::Create(options);
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  for (int i = 0; i < 2; ++i) {
    InterpreterSession session = (*manager)->Acquire(i);
    auto value = session.Eval("__import__('torch').ones(3).sum().item()");
    ASSERT_TRUE(value.ok()) << value.status().ToString();
    EXPECT_EQ(value->ToIValue()->toDouble(), 3.0);
  }
}

}  // namespace
}  // namespace chorus
