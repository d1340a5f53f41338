#include "chorus/common/process_stats.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "chorus/common/status_matchers.h"

namespace chorus {
namespace {

TEST(ProcessStatsTest, ResidentMemoryGrowsWithTouchedPages) {
  ASSERT_OK_AND_ASSIGN(double before, ResidentMiB());
  EXPECT_GT(before, 0.0);
  constexpr size_t kBytes = 64 << 20;
  auto block = std::make_unique<char[]>(kBytes);
  std::memset(block.get(), 1, kBytes);  // resident only once touched
  ASSERT_OK_AND_ASSIGN(double after, ResidentMiB());
  EXPECT_GE(after - before, 60.0) << before << " -> " << after;
  ASSERT_OK_AND_ASSIGN(double peak, PeakResidentMiB());
  EXPECT_GE(peak, after);
  EXPECT_EQ(block[kBytes - 1], 1);
}

TEST(ProcessStatsTest, AnotherProcessAndAMissingOne) {
  ASSERT_OK_AND_ASSIGN(double self, ResidentMiB(getpid()));
  EXPECT_GT(self, 0.0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // reaped: the pid names no process now
  EXPECT_THAT(ResidentMiB(child), StatusIs(StatusCode::kNotFound));
}

}  // namespace
}  // namespace chorus
