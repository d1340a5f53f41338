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
  const CellCommand serve = CellCommand::Serve(3);
  StatusOr<CellCommand> decoded = DecodeCellCommand(EncodeCellCommand(serve));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->kind, CellCommand::Kind::kServe);
  EXPECT_EQ(decoded->cell, 3);
  const CellCommand quarantine = CellCommand::Quarantine("m\"x", "crashed\ntwice");
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

TEST(CellCommandTest, ChangesAndTheirAnswersSurviveTheirEncoding) {
  const ModelChange load{ModelChange::Kind::kLoad, "m x", "123-4.cbor"};
  StatusOr<CellCommand> apply = DecodeCellCommand(EncodeCellCommand(CellCommand::Apply(7, load)));
  ASSERT_TRUE(apply.ok()) << apply.status().ToString();
  EXPECT_EQ(apply->kind, CellCommand::Kind::kApply);
  EXPECT_EQ(apply->id, 7);
  EXPECT_EQ(apply->change.kind, ModelChange::Kind::kLoad);
  EXPECT_EQ(apply->change.model, "m x");
  EXPECT_EQ(apply->change.override_file, "123-4.cbor");
  const Status failed(StatusCode::kInvalidArgument, "cell 1: failed to load 'm x'\n(why)");
  StatusOr<CellCommand> answer =
      DecodeCellCommand(EncodeCellCommand(CellCommand::Answer(int64_t{1} << 40, failed)));
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(answer->kind, CellCommand::Kind::kAnswer);
  EXPECT_EQ(answer->id, int64_t{1} << 40);
  EXPECT_EQ(answer->status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(answer->status.message(), failed.message());
  answer = DecodeCellCommand(EncodeCellCommand(CellCommand::Answer(2, OkStatus())));
  ASSERT_TRUE(answer.ok());
  EXPECT_TRUE(answer->status.ok());

  const ModelChange unload{ModelChange::Kind::kUnload, "m", ""};
  StatusOr<CellReport> request = DecodeCellReport(EncodeCellReport(CellReport::Request(3, unload)));
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  EXPECT_EQ(request->kind, CellReport::Kind::kRequest);
  EXPECT_EQ(request->id, 3);
  EXPECT_EQ(request->change.kind, ModelChange::Kind::kUnload);
  EXPECT_EQ(request->change.model, "m");
  EXPECT_EQ(request->change.override_file, "");
  StatusOr<CellReport> applied = DecodeCellReport(
      EncodeCellReport(CellReport::Applied(9, UnavailableError("no interpreter"))));
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ(applied->kind, CellReport::Kind::kApplied);
  EXPECT_EQ(applied->id, 9);
  EXPECT_EQ(applied->status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(applied->status.message(), "no interpreter");

  // What is wrong is named; an override file is a name in the changes folder, never a path.
  EXPECT_THAT(DecodeCellReport("{\"report\": \"reboot\", \"id\": 1}").status().message(),
              ::testing::HasSubstr("\"reboot\""));
  EXPECT_FALSE(DecodeCellReport("{\"report\": \"request\", \"id\": 1, \"change\": {\"kind\": "
                                "\"load\", \"model\": \"m\", \"override_file\": \"../x\"}}")
                   .ok());
  EXPECT_FALSE(DecodeCellReport("{\"report\": \"request\", \"id\": 1, \"change\": {\"kind\": "
                                "\"reload\", \"model\": \"m\", \"override_file\": \"\"}}")
                   .ok());
  EXPECT_FALSE(DecodeCellReport("{\"report\": \"applied\", \"id\": 1, \"status\": {\"code\": "
                                "99, \"message\": \"\"}}")
                   .ok());
  EXPECT_FALSE(DecodeCellCommand("{\"command\": \"answer\", \"id\": \"1\", \"status\": "
                                 "{\"code\": 0, \"message\": \"\"}}")
                   .ok());
  EXPECT_FALSE(DecodeCellReport(EncodeCellCommand(CellCommand::Serve(1))).ok());
}

TEST(CellCommandTest, ALoadsOverrideKeepsItsFilesBytes) {
  ChangeOverride override;
  override.config_json = "{\"backend\": \"python\", \"name\": \"\u00e9\"}";
  override.files["1/model.py"] = "import triton_python_backend_utils\n";
  override.files["1/weights.bin"] = std::string("\0\xff\x80\n\0", 5);
  StatusOr<ChangeOverride> decoded = DecodeChangeOverride(EncodeChangeOverride(override));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->config_json, override.config_json);
  EXPECT_EQ(decoded->files, override.files);
  EXPECT_FALSE(DecodeChangeOverride("{\"config\": \"\"}").ok());
  EXPECT_FALSE(DecodeChangeOverride("").ok());
}

TEST(CellCommandTest, AServingRunCarriesTheRecordOfChanges) {
  ServingRun run;
  run.restarts = 2;
  run.quarantined["crashy"] = "crashed twice";
  run.model_changes = {{ModelChange::Kind::kLoad, "a", "1-1.cbor"},
                       {ModelChange::Kind::kUnload, "b", ""}};
  run.changes_dir = "/tmp/chorus-changes-x";
  run.cell = 1;
  StatusOr<ServingRun> decoded = DecodeServingRun(EncodeServingRun(run));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->restarts, 2);
  EXPECT_EQ(decoded->quarantined, run.quarantined);
  ASSERT_EQ(decoded->model_changes.size(), 2u);
  EXPECT_EQ(decoded->model_changes[0].kind, ModelChange::Kind::kLoad);
  EXPECT_EQ(decoded->model_changes[0].model, "a");
  EXPECT_EQ(decoded->model_changes[0].override_file, "1-1.cbor");
  EXPECT_EQ(decoded->model_changes[1].kind, ModelChange::Kind::kUnload);
  EXPECT_EQ(decoded->changes_dir, run.changes_dir);
  EXPECT_EQ(decoded->cell, 1);
}

TEST(CellCommandTest, AFullPipeIsWaitedOnNotDroppedAndLongLinesArriveWhole) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK), 0);
  // Fill the pipe with whole commands until it takes no more.
  const std::string serve = EncodeCellCommand(CellCommand::Serve(1));
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
  EXPECT_OK(WriteCellCommand(pipe_fds[1], CellCommand::Quarantine("last", why)));
  ::close(pipe_fds[1]);
  reader.join();
  ::close(pipe_fds[0]);
  ASSERT_EQ(received.size(), static_cast<size_t>(queued) + 1);
  EXPECT_EQ(received.back().kind, CellCommand::Kind::kQuarantine);
  EXPECT_EQ(received.back().model, "last");
  EXPECT_EQ(received.back().why, why);
}

// Serving process stand-ins for the supervisor: each says on `events` that
// it started ("start <pid> <cell> <spare> <preloaded> <changes> <quarantined>",
// the record it was given: "load:a,unload:b" and "poison", "-" when empty)
// and what it is told ("serve <pid> <cell>", "quarantine <pid> <model>",
// "apply <pid> <model>", "answer <pid> <code> <message>"), and runs "model
// poison" until killed. On SIGUSR1 it asks for the next change of
// g_requests. Carrying a change out, the first cell 1 (not a spare taking
// its place) fails "bad" and dies of "die"; every other change succeeds.
// Set by the preload: serving processes forked from the preloaded process have it.
bool g_preloaded = false;
std::vector<ModelChange> g_requests;
volatile sig_atomic_t g_ask = 0;

std::string Joined(const std::vector<std::string>& words) {
  std::string joined;
  for (const std::string& word : words) joined += (joined.empty() ? "" : ",") + word;
  return joined.empty() ? "-" : joined;
}

std::string RecordOf(const ServingRun& run) {
  std::vector<std::string> changes, quarantined;
  for (const ModelChange& change : run.model_changes) {
    changes.push_back((change.kind == ModelChange::Kind::kLoad ? "load:" : "unload:") +
                      change.model);
  }
  for (const auto& [model, why] : run.quarantined) quarantined.push_back(model);
  return Joined(changes) + " " + Joined(quarantined);
}

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
    ::signal(SIGUSR1, [](int) { g_ask = 1; });
    ScopedCrashContext running("model poison version 1, request r");
    const std::string pid = std::to_string(::getpid());
    Say(events_[1], "start " + pid + " " + std::to_string(run.cell) + " " +
                        std::to_string(run.spare ? 1 : 0) + " " +
                        std::to_string(g_preloaded ? 1 : 0) + " " + RecordOf(run));
    CellCommandReader commands(run.control_fd);
    size_t asked = 0;
    while (true) {
      pollfd control{run.control_fd, POLLIN, 0};
      ::poll(&control, 1, 10);
      if (g_ask != 0 && asked < g_requests.size()) {
        g_ask = 0;
        EXPECT_OK(WriteCellReport(run.control_fd, CellReport::Request(asked, g_requests[asked])));
        ++asked;
      }
      if (!commands.ReadAvailable(
              [&](const StatusOr<CellCommand>& command) { Follow(run, pid, *command); })) {
        return 0;
      }
    }
  }

  void Follow(const ServingRun& run, const std::string& pid, const CellCommand& command) {
    const bool first_cell_1 = run.cell == 1 && !run.spare;
    switch (command.kind) {
      case CellCommand::Kind::kServe:
        return Say(events_[1], "serve " + pid + " " + std::to_string(command.cell));
      case CellCommand::Kind::kQuarantine:
        return Say(events_[1], "quarantine " + pid + " " + command.model);
      case CellCommand::Kind::kAnswer:
        return Say(events_[1], "answer " + pid + " " +
                                   std::to_string(static_cast<int>(command.status.code())) + " " +
                                   command.status.message());
      case CellCommand::Kind::kApply: {
        Say(events_[1], "apply " + pid + " " + command.change.model);
        if (first_cell_1 && command.change.model == "die") ::kill(::getpid(), SIGKILL);
        const Status status = first_cell_1 && command.change.model == "bad"
                                  ? InvalidArgumentError("bad model")
                                  : OkStatus();
        EXPECT_OK(WriteCellReport(run.control_fd, CellReport::Applied(command.id, status)));
      }
    }
  }

  using Events = std::map<std::string, std::vector<std::string>>;

  // Forks a supervisor of 2 cells and a spare that serve with Serve; fills
  // `pids` ("cell 0", "cell 1", "spare" -> pid) once all three started.
  pid_t StartSupervisor(std::map<std::string, std::string>* pids) {
    const pid_t supervisor = ::fork();
    if (supervisor == 0) {
      SupervisorOptions options;
      options.cells = 2;
      options.spare = true;
      options.first_backoff = std::chrono::milliseconds(20);
      if (GetParam()) options.preload = [] { g_preloaded = true; };
      ::_exit(Supervise(options, [this](const ServingRun& run) { return Serve(run); }));
    }
    for (const auto& [event, words] : NextEvents(3)) {
      EXPECT_EQ(words.size(), 5u) << event;
      if (words.size() == 5)
        (*pids)[words[1] == "1" ? "spare" : "cell " + words[0]] = event.substr(6);
    }
    EXPECT_EQ(pids->size(), 3u);
    return supervisor;
  }

  // SIGTERM to the supervisor: it ends once every process did.
  static void Stop(pid_t supervisor) {
    ::kill(supervisor, SIGTERM);
    int status = 0;
    ASSERT_EQ(::waitpid(supervisor, &status, 0), supervisor);
    EXPECT_TRUE(WIFEXITED(status));
  }

  // The pid of the process whose start is among `events` ("" if none), and
  // its start's words (cell, spare, preloaded, changes, quarantined).
  static std::string Started(const Events& events, std::vector<std::string>* words) {
    for (const auto& [event, said] : events) {
      if (event.rfind("start ", 0) != 0) continue;
      if (words != nullptr) *words = said;
      return event.substr(6);
    }
    return "";
  }

  static std::string Words(const std::vector<std::string>& words) {
    std::string joined;
    for (const std::string& word : words) joined += (joined.empty() ? "" : " ") + word;
    return joined;
  }

  // The next `count` events, each as "<first word> <pid>" -> its other words.
  Events NextEvents(int count) {
    Events events;
    for (int i = 0; i < count; ++i) {
      std::vector<std::string> event = Next();
      if (event.size() < 2) return events;
      events[event[0] + " " + event[1]] = std::vector<std::string>(event.begin() + 2, event.end());
    }
    return events;
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
    ASSERT_EQ(event.size(), 7u);
    ASSERT_EQ(event[0], "start");
    EXPECT_EQ(event[4], GetParam() ? "1" : "0");
    started[event[3] == "1" ? "spare" : "cell " + event[2]] = std::stoi(event[1]);
  }
  ASSERT_EQ(started.size(), 3u);
  // Cell 0 dies: the spare serves as cell 0 and a new spare starts.
  ::kill(started["cell 0"], SIGKILL);
  EXPECT_THAT(Next(), ElementsAre("serve", std::to_string(started["spare"]), "0"));
  std::vector<std::string> second_spare = Next();
  ASSERT_EQ(second_spare.size(), 7u);
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

TEST_P(CellSupervisorTest, ChangesReachEveryProcessAndTheAnswerNamesTheFirstCellThatFailed) {
  using Kind = ModelChange::Kind;
  g_requests = {{Kind::kLoad, "m", ""}, {Kind::kLoad, "bad", ""}, {Kind::kLoad, "die", ""}};
  std::map<std::string, std::string> pid;
  const pid_t supervisor = StartSupervisor(&pid);
  const std::string origin = pid["cell 0"];
  // A load cell 0 asks for: every process carries it out, then cell 0 hears OK.
  ::kill(std::stoi(origin), SIGUSR1);
  EXPECT_EQ(NextEvents(4), (Events{{"apply " + pid["cell 0"], {"m"}},
                                   {"apply " + pid["cell 1"], {"m"}},
                                   {"apply " + pid["spare"], {"m"}},
                                   {"answer " + origin, {"0"}}}));
  // One that fails in cell 1: the answer is its error, naming it.
  ::kill(std::stoi(origin), SIGUSR1);
  EXPECT_EQ(NextEvents(4), (Events{{"apply " + pid["cell 0"], {"bad"}},
                                   {"apply " + pid["cell 1"], {"bad"}},
                                   {"apply " + pid["spare"], {"bad"}},
                                   {"answer " + origin, {"3", "cell", "1:", "bad", "model"}}}));
  // Cell 1 dies carrying one out: a failure there; the spare takes its place,
  // and the new spare starts with every change in its record.
  ::kill(std::stoi(origin), SIGUSR1);
  Events events = NextEvents(6);
  EXPECT_EQ(events["apply " + pid["cell 0"]], std::vector<std::string>{"die"});
  EXPECT_EQ(events["apply " + pid["cell 1"]], std::vector<std::string>{"die"});
  EXPECT_EQ(events["apply " + pid["spare"]], std::vector<std::string>{"die"});
  EXPECT_EQ(events["serve " + pid["spare"]], std::vector<std::string>{"1"});
  EXPECT_EQ(Words(events["answer " + origin]),
            "14 cell 1: its serving process died (signal SIGKILL) before it would load model die");
  std::vector<std::string> record;
  EXPECT_FALSE(Started(events, &record).empty());
  EXPECT_EQ(Words(record),
            std::string("0 1 ") + (GetParam() ? "1" : "0") + " load:m,load:bad,load:die -");
  Stop(supervisor);
}

TEST_P(CellSupervisorTest, AnExplicitLoadReadmitsAQuarantinedModelForTheProcessesStartedLater) {
  g_requests = {{ModelChange::Kind::kLoad, "poison", ""}};
  std::map<std::string, std::string> pid;
  const pid_t supervisor = StartSupervisor(&pid);
  const std::string origin = pid["cell 0"];
  // Cell 1 dies twice running "poison": the second time, quarantined in every
  // process, and the spare started after it has it in its record.
  ::kill(std::stoi(pid["cell 1"]), SIGKILL);
  Events events = NextEvents(2);
  EXPECT_EQ(events["serve " + pid["spare"]], std::vector<std::string>{"1"});
  const std::string second_spare = Started(events, nullptr);
  ::kill(std::stoi(pid["spare"]), SIGKILL);
  events = NextEvents(4);
  EXPECT_EQ(events["quarantine " + origin], std::vector<std::string>{"poison"});
  EXPECT_EQ(events["quarantine " + second_spare], std::vector<std::string>{"poison"});
  EXPECT_EQ(events["serve " + second_spare], std::vector<std::string>{"1"});
  std::vector<std::string> record;
  const std::string third_spare = Started(events, &record);
  EXPECT_EQ(record.at(3) + " " + record.at(4), "- poison");
  // An explicit load re-admits it: carried out everywhere, and a process
  // started later has it in its record and no longer quarantined.
  ::kill(std::stoi(origin), SIGUSR1);
  EXPECT_EQ(NextEvents(4), (Events{{"apply " + origin, {"poison"}},
                                   {"apply " + second_spare, {"poison"}},
                                   {"apply " + third_spare, {"poison"}},
                                   {"answer " + origin, {"0"}}}));
  ::kill(std::stoi(second_spare), SIGKILL);
  events = NextEvents(2);
  EXPECT_EQ(events["serve " + third_spare], std::vector<std::string>{"1"});
  EXPECT_FALSE(Started(events, &record).empty());
  EXPECT_EQ(record.at(3) + " " + record.at(4), "load:poison -");
  Stop(supervisor);
}

INSTANTIATE_TEST_SUITE_P(ForkedBy, CellSupervisorTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "ThePreloadedProcess" : "TheSupervisor";
                         });

}  // namespace
}  // namespace chorus
