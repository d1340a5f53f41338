#include "chorus/common/crash_report.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

namespace chorus {
namespace {

struct Death {
  int signal = 0;  // 0 if the child did not die of a signal
  std::string report;
};

// Runs `body` in a child process with the crash handler writing to a pipe;
// returns the signal the child died of and what it reported.
Death RunChild(const std::function<void()>& body) {
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    InstallCrashHandler("crash_report_test", pipe_fds[1]);
    body();
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  Death death;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0) death.report.append(buffer, n);
  ::close(pipe_fds[0]);
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, 0), child);
  if (WIFSIGNALED(status)) death.signal = WTERMSIG(status);
  return death;
}

void SayHello(int fd) {
  const char text[] = "  hook: the interpreter would say which, and its Python stack\n";
  EXPECT_EQ(::write(fd, text, sizeof(text) - 1), static_cast<ssize_t>(sizeof(text) - 1));
}

TEST(CrashReportTest, ASegfaultReportsWhatTheThreadRanThenDiesOfTheSignal) {
  void* page = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  char address[32];
  std::snprintf(address, sizeof(address), "%p", page);
  Death death = RunChild([page] {
    AddCrashReportHook(&SayHello);
    ScopedCrashContext model("model crashy version 1");
    { ScopedCrashContext earlier("requests that finished"); }
    ScopedCrashContext requests("requests poison-1");
    std::printf("%d\n", *static_cast<volatile int*>(page));  // faults: PROT_NONE
  });
  EXPECT_EQ(death.signal, SIGSEGV) << death.report;
  EXPECT_NE(death.report.find(std::string("crash_report_test: fatal signal SIGSEGV (address ") +
                              address + ") on thread "),
            std::string::npos)
      << death.report;
  EXPECT_NE(death.report.find("  running: model crashy version 1 > requests poison-1\n"),
            std::string::npos)
      << death.report;
  EXPECT_EQ(death.report.find("finished"), std::string::npos) << death.report;
  EXPECT_NE(death.report.find("  hook: the interpreter would say which"), std::string::npos);
  EXPECT_NE(death.report.find("  native stack:\n"), std::string::npos);
  ::munmap(page, 4096);
}

TEST(CrashReportTest, AnAbortOutsideAnyModelSaysSo) {
  Death death = RunChild([] { std::abort(); });
  EXPECT_EQ(death.signal, SIGABRT) << death.report;
  EXPECT_NE(death.report.find("crash_report_test: fatal signal SIGABRT on thread "),
            std::string::npos)
      << death.report;
  EXPECT_NE(death.report.find("  running: nothing chorus knows of (not a model call)\n"),
            std::string::npos)
      << death.report;
}

TEST(CrashReportTest, WriteCrashContextIsWhatTheReportPrints) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  {
    ScopedCrashContext context("training job j1 step");
    WriteCrashContext(pipe_fds[1]);
  }
  WriteCrashContext(pipe_fds[1]);
  ::close(pipe_fds[1]);
  char buffer[1024];
  const ssize_t n = ::read(pipe_fds[0], buffer, sizeof(buffer));
  ::close(pipe_fds[0]);
  ASSERT_GT(n, 0);
  const std::string text(buffer, n);
  EXPECT_EQ(text.rfind("  running: training job j1 step\n", 0), 0u) << text;
  EXPECT_NE(text.find("  running: nothing chorus knows of"), std::string::npos) << text;
}

TEST(CrashBoardTest, AParentReadsWhatTheThreadsOfAKilledChildRan) {
  std::unique_ptr<CrashBoard> board = CrashBoard::Create();
  ASSERT_NE(board, nullptr);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    board->Attach();
    std::thread([] { ScopedCrashContext done("model finished version 1"); }).join();
    ScopedCrashContext serving("model mlp version 1, request r1");
    // A process the child forks keeps its contexts to itself.
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ScopedCrashContext mine("grandchild");
      ::_exit(0);
    }
    ::waitpid(grandchild, nullptr, 0);
    std::thread training([&] {
      ScopedCrashContext step("training job j1 rank 1, step");
      ::close(ready[1]);  // the parent may kill now
      ::pause();
    });
    training.join();
  }
  ::close(ready[1]);
  char byte;
  EXPECT_EQ(::read(ready[0], &byte, 1), 0);  // closed by the child's training thread
  ::close(ready[0]);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const std::string running = board->RunningNow();
  EXPECT_NE(running.find("model mlp version 1, request r1\n"), std::string::npos) << running;
  EXPECT_NE(running.find("training job j1 rank 1, step\n"), std::string::npos) << running;
  EXPECT_EQ(running.find("finished"), std::string::npos) << running;
  EXPECT_EQ(running.find("grandchild"), std::string::npos) << running;
  board->Clear();
  EXPECT_EQ(board->RunningNow(), "");
}

}  // namespace
}  // namespace chorus
