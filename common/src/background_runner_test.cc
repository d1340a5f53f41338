// BackgroundRunner: work runs in order, off the caller's thread, and Stop
// finishes what was queued and refuses the rest.
#include "chorus/common/background_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace chorus {
namespace {

using ::testing::ElementsAre;

TEST(BackgroundRunnerTest, RunsWorkInOrderOnItsOwnThread) {
  std::vector<int> order;
  std::thread::id ran_on;
  {
    BackgroundRunner runner;
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(runner.Post([&order, &ran_on, i] {
        order.push_back(i);
        ran_on = std::this_thread::get_id();
      }));
    }
    runner.Stop();
  }
  EXPECT_THAT(order, ElementsAre(0, 1, 2));
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(BackgroundRunnerTest, StopFinishesQueuedWorkAndRefusesMore) {
  BackgroundRunner runner;
  std::atomic<int> done{0};
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(runner.Post([&done] { done.fetch_add(1); }));
  std::thread other([&runner] { runner.Stop(); });  // two stoppers at once
  runner.Stop();
  other.join();
  EXPECT_EQ(done.load(), 50);
  EXPECT_FALSE(runner.Post([&done] { done.fetch_add(1); }));
  EXPECT_EQ(done.load(), 50);
}

}  // namespace
}  // namespace chorus
