#include "chorus/server/supervisor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <limits.h>
#include <poll.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chorus/common/crash_report.h"
#include "chorus/common/status_matchers.h"
#include "chorus/server/cell_control.h"

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

TEST(CellCommandTest, CommandsSurviveTheirEncodingAndBadLinesAreNamed) {
  const CellCommand serve{CellCommand::Kind::kServe, 3, "", ""};
  StatusOr<CellCommand> decoded = DecodeCellCommand(EncodeCellCommand(serve));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->kind, CellCommand::Kind::kServe);
  EXPECT_EQ(decoded->cell, 3);
  const CellCommand quarantine{CellCommand::Kind::kQuarantine, 0, "m\"x", "crashed\ntwice"};
  std::string line = EncodeCellCommand(quarantine);
  ASSERT_EQ(line.back(), '\n');
  line.pop_back();
  EXPECT_EQ(line.find('\n'), std::string::npos);  // one line, whatever the why holds
  decoded = DecodeCellCommand(line);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->model, "m\"x");
  EXPECT_EQ(decoded->why, "crashed\ntwice");
  EXPECT_THAT(DecodeCellCommand("{\"command\": \"reboot\"}").status().message(),
              ::testing::HasSubstr("\"reboot\""));
  EXPECT_FALSE(DecodeCellCommand("serve 1").ok());
  EXPECT_FALSE(DecodeCellCommand("{\"command\": \"serve\", \"cell\": \"1\"}").ok());
}

TEST(CellCommandTest, AFullPipeIsWaitedOnNotDroppedAndLongLinesArriveWhole) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK), 0);
  // Fill the pipe with whole commands until it takes no more.
  const std::string serve = EncodeCellCommand({CellCommand::Kind::kServe, 1, "", ""});
  int queued = 0;
  while (::write(pipe_fds[1], serve.data(), serve.size()) == static_cast<ssize_t>(serve.size())) {
    ++queued;
  }
  ASSERT_EQ(errno, EAGAIN);
  // The reader starts behind: the write below finds the pipe full.
  std::vector<CellCommand> received;
  std::thread reader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CellCommandReader commands(pipe_fds[0]);
    pollfd readable{pipe_fds[0], POLLIN, 0};
    while (::poll(&readable, 1, 10000) > 0 &&
           commands.ReadAvailable([&](const StatusOr<CellCommand>& command) {
             ASSERT_TRUE(command.ok()) << command.status().ToString();
             received.push_back(*command);
           })) {
    }
  });
  // Longer than PIPE_BUF: written in parts as room comes.
  const std::string why(3 * PIPE_BUF, 'w');
  EXPECT_OK(WriteCellCommand(pipe_fds[1], {CellCommand::Kind::kQuarantine, 0, "last", why}));
  ::close(pipe_fds[1]);
  reader.join();
  ::close(pipe_fds[0]);
  ASSERT_EQ(received.size(), static_cast<size_t>(queued) + 1);
  EXPECT_EQ(received.back().kind, CellCommand::Kind::kQuarantine);
  EXPECT_EQ(received.back().model, "last");
  EXPECT_EQ(received.back().why, why);
}

// Serving process stand-ins for the supervisor: each says on `events` that
// it started ("start <pid> <cell> <spare>") and what it is told ("serve <pid>
// <cell>", "quarantine <pid> <model>"), and runs "model poison" until killed.
// Set by the preload: serving processes forked from the preloaded process have it.
bool g_preloaded = false;

// The parameter: whether the serving processes are forked from a preloaded process.
class CellSupervisorTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { ASSERT_EQ(::pipe(events_), 0); }
  void TearDown() override {
    ::close(events_[0]);
    ::close(events_[1]);
  }

  static void Say(int fd, const std::string& line) {
    const std::string text = line + "\n";
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }

  int Serve(const ServingRun& run) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    ::sigprocmask(SIG_UNBLOCK, &stop, nullptr);  // dies of the supervisor's SIGTERM
    ScopedCrashContext running("model poison version 1, request r");
    const std::string pid = std::to_string(::getpid());
    Say(events_[1], "start " + pid + " " + std::to_string(run.cell) + " " +
                        std::to_string(run.spare ? 1 : 0) + " " +
                        std::to_string(g_preloaded ? 1 : 0));
    CellCommandReader commands(run.control_fd);
    while (true) {
      pollfd control{run.control_fd, POLLIN, 0};
      ::poll(&control, 1, -1);
      if (!commands.ReadAvailable([&](const StatusOr<CellCommand>& command) {
            if (command->kind == CellCommand::Kind::kServe) {
              Say(events_[1], "serve " + pid + " " + std::to_string(command->cell));
            } else {
              Say(events_[1], "quarantine " + pid + " " + command->model);
            }
          })) {
        return 0;
      }
    }
  }

  // The next event's words; fails after 30 s.
  std::vector<std::string> Next() {
    std::string line;
    for (char c = 0; c != '\n';) {
      pollfd readable{events_[0], POLLIN, 0};
      if (::poll(&readable, 1, 30000) != 1 || ::read(events_[0], &c, 1) != 1) {
        ADD_FAILURE() << "no event after \"" << line << "\"";
        return {};
      }
      if (c != '\n') line += c;
    }
    std::istringstream words(line);
    std::vector<std::string> parts;
    for (std::string word; words >> word;) parts.push_back(word);
    return parts;
  }

  int events_[2];
};

TEST_P(CellSupervisorTest, TheSpareTakesADeadCellsPlaceAndQuarantinesReachEveryProcess) {
  const pid_t supervisor = ::fork();
  if (supervisor == 0) {
    SupervisorOptions options;
    options.cells = 2;
    options.spare = true;
    options.first_backoff = std::chrono::milliseconds(20);
    if (GetParam()) options.preload = [] { g_preloaded = true; };
    ::_exit(Supervise(options, [this](const ServingRun& run) { return Serve(run); }));
  }
  // Two cells and the spare start.
  std::map<std::string, pid_t> started;  // "cell 0", "cell 1", "spare" -> pid
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> event = Next();
    ASSERT_EQ(event.size(), 5u);
    ASSERT_EQ(event[0], "start");
    EXPECT_EQ(event[4], GetParam() ? "1" : "0");
    started[event[3] == "1" ? "spare" : "cell " + event[2]] = std::stoi(event[1]);
  }
  ASSERT_EQ(started.size(), 3u);
  // Cell 0 dies: the spare serves as cell 0 and a new spare starts.
  ::kill(started["cell 0"], SIGKILL);
  EXPECT_THAT(Next(), ElementsAre("serve", std::to_string(started["spare"]), "0"));
  std::vector<std::string> second_spare = Next();
  ASSERT_EQ(second_spare.size(), 5u);
  EXPECT_EQ(second_spare[0], "start");
  EXPECT_EQ(second_spare[3], "1");
  // Cell 1 dies running the same model: its second crash quarantines it in
  // every process that runs (the old spare, now cell 0, and the new spare),
  // then the new spare serves as cell 1.
  ::kill(started["cell 1"], SIGKILL);
  std::map<std::string, std::string> told;
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> event = Next();
    ASSERT_EQ(event.size(), 3u);
    told[event[0] + " " + event[1]] = event[2];
  }
  EXPECT_EQ(told["quarantine " + std::to_string(started["spare"])], "poison");
  EXPECT_EQ(told["quarantine " + second_spare[1]], "poison");
  EXPECT_EQ(told["serve " + second_spare[1]], "1");
  // A third spare; then a stop ends every process and the supervisor.
  EXPECT_EQ(Next().at(0), "start");
  ::kill(supervisor, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(supervisor, &status, 0), supervisor);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
}

INSTANTIATE_TEST_SUITE_P(ForkedBy, CellSupervisorTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "ThePreloadedProcess" : "TheSupervisor";
                         });

}  // namespace
}  // namespace chorus
