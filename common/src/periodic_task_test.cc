#include "chorus/common/periodic_task.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace chorus {
namespace {

TEST(PeriodicTaskTest, RunsEveryIntervalAndStopsWhenDestroyed) {
  std::atomic<int> runs{0};
  {
    PeriodicTask task(std::chrono::milliseconds(10), [&] { ++runs; });
    while (runs.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const int after = runs.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(runs.load(), after);  // nothing runs once destroyed
}

TEST(PeriodicTaskTest, DestroyingItDoesNotWaitForTheInterval) {
  const auto start = std::chrono::steady_clock::now();
  {
    PeriodicTask task(std::chrono::hours(1), [] {});
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace chorus
