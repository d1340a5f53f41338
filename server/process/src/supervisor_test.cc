#include "chorus/server/supervisor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

namespace chorus {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(SupervisorTest, CrashRecordsNameTheModelsThatWereRunning) {
  EXPECT_THAT(ModelsInCrashRecord("model crashy version 1, request poison-1\n"),
              ElementsAre("crashy"));
  EXPECT_THAT(ModelsInCrashRecord("model a version 2, requests x, y\n"
                                  "model b version 1, request (no id)\n"
                                  "model a version 2, request z\n"),
              ElementsAre("a", "b"));
  EXPECT_THAT(ModelsInCrashRecord(""), IsEmpty());
  EXPECT_THAT(ModelsInCrashRecord("training job job-1 rank 0, step\n"), IsEmpty());
}

TEST(SupervisorTest, CrashRecordsNameTheTrainingJobsThatWereRunning) {
  EXPECT_THAT(JobsInCrashRecord("training job job-3 rank 1, save\n"
                                "training job job-3 rank 0, save\n"
                                "training job job-10 rank 0, step\n"),
              ElementsAre("job-3", "job-10"));
  EXPECT_THAT(JobsInCrashRecord("model crashy version 1, request poison-1\n"), IsEmpty());
}

int WaitStatusOf(void (*body)()) {
  const pid_t child = ::fork();
  if (child == 0) body();
  int status = 0;
  ::waitpid(child, &status, 0);
  return status;
}

TEST(SupervisorTest, WaitStatusesAreDescribedAsAnOperatorReadsThem) {
  EXPECT_EQ(DescribeWaitStatus(WaitStatusOf([] { ::_exit(3); })), "exit status 3");
  EXPECT_EQ(DescribeWaitStatus(WaitStatusOf([] {
              ::signal(SIGSEGV, SIG_DFL);
              ::raise(SIGSEGV);
            })),
            "signal SIGSEGV");
  EXPECT_EQ(DescribeWaitStatus(WaitStatusOf([] { ::kill(::getpid(), SIGKILL); })),
            "signal SIGKILL");
}

}  // namespace
}  // namespace chorus
