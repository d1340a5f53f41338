#include "chorus/server/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "chorus/common/crash_label.h"
#include "chorus/common/crash_report.h"
#include "chorus/common/file_util.h"
#include "chorus/common/logging.h"
#include "chorus/common/process_stats.h"
#include "chorus/server/cell_control.h"
#include "server/process/src/change_relay.h"
#include "server/process/src/preloaded_forks.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

sigset_t SupervisedSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGCHLD);
  return signals;
}

// Whether SIGTERM or SIGINT waits (blocked) for the supervisor's loop.
bool StopPending() {
  sigset_t pending;
  return ::sigpending(&pending) == 0 &&
         (sigismember(&pending, SIGTERM) == 1 || sigismember(&pending, SIGINT) == 1);
}

// Everything readable from `fd` now (non-blocking; the writer is gone).
std::string ReadAvailable(int fd) {
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) text.append(buffer, n);
  return text;
}

// Crash times per model and per training job; quarantines one that reaches
// the limit.
class CrashHistory {
 public:
  explicit CrashHistory(const SupervisorOptions& options) : options_(options) {}

  // Counts the crash `record` describes; returns the models it quarantined.
  std::vector<std::string> Record(const std::string& record, const std::string& exit,
                                  ServingRun* run) {
    const std::string line = record.substr(0, record.find('\n'));
    std::vector<std::string> quarantined;
    for (const std::string& model : ModelsInCrashRecord(record)) {
      if (std::optional<std::string> why = Count("model " + model, exit, line)) {
        run->quarantined[model] = *why + "; load it explicitly to re-admit it";
        Log().error("supervisor: model {} {}", model, run->quarantined[model]);
        quarantined.push_back(model);
      }
    }
    for (const std::string& job : JobsInCrashRecord(record)) {
      if (std::optional<std::string> why = Count("job " + job, exit, line)) {
        run->quarantined_jobs[job] = *why;
        Log().error("supervisor: training job {} {}", job, *why);
      }
    }
    return quarantined;
  }

 private:
  // Counts a crash of `key`; why it is quarantined once it reaches the limit.
  std::optional<std::string> Count(const std::string& key, const std::string& exit,
                                   const std::string& line) {
    const Clock::time_point now = Clock::now();
    std::vector<Clock::time_point>& times = crashes_[key];
    times.push_back(now);
    times.erase(
        std::remove_if(times.begin(), times.end(),
                       [&](Clock::time_point t) { return now - t > options_.quarantine_window; }),
        times.end());
    if (static_cast<int>(times.size()) < options_.quarantine_after) return std::nullopt;
    const std::string why = "is quarantined: it was running when the serving process died " +
                            std::to_string(times.size()) + " times within " +
                            std::to_string(options_.quarantine_window.count() / 1000) +
                            " s (last: " + exit + ", " + line + ")";
    times.clear();
    return why;
  }

  const SupervisorOptions& options_;
  std::map<std::string, std::vector<Clock::time_point>> crashes_;
};

// The names of the labels of `kind` in `record`, each once, in order.
std::vector<std::string> NamesInCrashRecord(const std::string& record, CrashLabel::Kind kind) {
  std::vector<std::string> names;
  for (const CrashLabel& label : CrashLabelsIn(record)) {
    if (label.kind() != kind) continue;
    if (std::find(names.begin(), names.end(), label.name()) == names.end()) {
      names.push_back(label.name());
    }
  }
  return names;
}

// The serving processes of one supervisor: K cells and the spare, each
// restarted after a growing pause when it dies.
class CellSupervisor {
 public:
  CellSupervisor(const SupervisorOptions& options, std::function<int(const ServingRun&)> serve)
      : options_(options), serve_(std::move(serve)), history_(options_), relay_(&run_) {
    slots_.resize(std::max(1, options_.cells));
    if (!single()) MakeChangesDir();
    for (Slot& slot : slots_) slot.backoff = options_.first_backoff;
    spare_slot_.backoff = options_.first_backoff;
    // A board per place, made before any fork (the preloaded process's too);
    // a board moves with the spare to the cell it takes.
    for (size_t i = 0; i <= slots_.size(); ++i) boards_.push_back(CrashBoard::Create());
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i].board = static_cast<int>(i);
    spare_slot_.board = static_cast<int>(slots_.size());
  }

  int Run();

 private:
  static constexpr int kSpare = -1;  // Child::cell of the spare

  // A serving process.
  struct Child {
    int cell = 0;         // which cell it serves; kSpare while the spare
    int record_fd = -1;   // its crash record (read end)
    int control_fd = -1;  // its commands and reports (our end of a socket pair)
    Clock::time_point started;
    double peak_mib = 0;  // peak resident memory, sampled each second
    int board = 0;        // boards_[board]: what its threads run
    CellReportReader reports;
    bool reports_open = true;  // false once it closed its end (it is dying)
  };
  // A cell's (or the spare's) place: the process in it, or when it restarts.
  struct Slot {
    pid_t pid = 0;  // 0: none now
    Clock::time_point restart_at;
    std::chrono::milliseconds backoff{0};
    int board = 0;  // the boards_ entry of the process in it
  };

  bool single() const { return slots_.size() == 1 && !options_.spare; }
  // "serving process", "cell 1's serving process", "the spare serving process".
  std::string Name(int cell) const {
    if (cell == kSpare) return "the spare serving process";
    return single() ? "serving process" : "cell " + std::to_string(cell) + "'s serving process";
  }
  Slot& SlotOf(int cell) { return cell == kSpare ? spare_slot_ : slots_[cell]; }
  CrashBoard* Board(int index) const { return boards_[index].get(); }
  // How the relay addresses the process `pid` runs as `child`, and every one.
  ChangeRelay::Process ProcessOf(pid_t pid, const Child& child) const;
  ChangeRelay::Processes Processes() const;
  // The folder where loads' overrides lie for every process (several of them).
  void MakeChangesDir();

  void Start(int cell);
  // Forks the serving process for `run` itself (no preloaded process); the
  // child keeps record_pipe[1] and control_pipe[0].
  pid_t ForkDirectly(const ServingRun& run, int board, const int record_pipe[2],
                     const int control_pipe[2]);
  // A start that failed (`what`, errno): tried again after the slot's pause, which doubles.
  void FailedStart(Slot& slot, const char* what);
  // Its exit, when `pid` is the preloaded process.
  bool OnPreloadedExit(pid_t pid, int status);
  void OnExit(pid_t pid, int status);
  // Hands cell `cell` to the spare; false if there is none to take it.
  bool Adopt(int cell);
  void Quarantine(const std::string& model);
  // Starts the processes whose restart time came; samples peak memory.
  void Tick();
  Clock::time_point NextTick() const;
  // Waits until `until` for a signal or a serving process's report; reads the reports.
  void Wait(Clock::time_point until);
  void ReadReports(pid_t pid);
  void OnReport(pid_t pid, const StatusOr<CellReport>& report);
  // The next supervised signal taken, 0 if none is pending.
  int NextSignal();
  // Handles `sig`; the supervisor's exit status once it must end.
  std::optional<int> OnSignal(int sig);
  void StartPreloaded();

  const SupervisorOptions options_;
  const std::function<int(const ServingRun&)> serve_;
  std::vector<std::unique_ptr<CrashBoard>> boards_;
  std::unique_ptr<PreloadedForks> preloaded_;  // set while one runs
  CrashHistory history_;
  ServingRun run_;  // what the next process is told
  ScopedTempDir changes_dir_;
  ChangeRelay relay_;  // repository calls' changes, carried out by every process
  int signal_fd_ = -1;
  std::map<pid_t, Child> children_;
  std::vector<Slot> slots_;
  Slot spare_slot_;
  int stopping_ = 0;  // the stop signal forwarded, 0 while serving
  int exit_code_ = 0;
};

void CellSupervisor::Start(int cell) {
  Slot& slot = SlotOf(cell);
  // control_pipe: [0] the process's end, [1] ours; a socket pair, both ways.
  int record_pipe[2], control_pipe[2];
  if (::pipe2(record_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    return FailedStart(slot, "pipe");
  }
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, control_pipe) != 0) {
    ::close(record_pipe[0]);
    ::close(record_pipe[1]);
    return FailedStart(slot, "socketpair");
  }
  ServingRun run = run_;
  run.cell = cell == kSpare ? 0 : cell;
  run.spare = cell == kSpare;
  pid_t pid = -1;
  if (preloaded_ != nullptr) {
    StatusOr<pid_t> forked = preloaded_->Fork(run, slot.board, record_pipe[1], control_pipe[0]);
    if (forked.ok()) {
      pid = *forked;
    } else {
      Log().error("supervisor: {}; serving processes are forked directly from now on",
                  forked.status().ToString());
      preloaded_.reset();
    }
  }
  if (pid < 0) pid = ForkDirectly(run, slot.board, record_pipe, control_pipe);
  ::close(record_pipe[1]);
  ::close(control_pipe[0]);
  if (pid < 0) {
    ::close(record_pipe[0]);
    ::close(control_pipe[1]);
    return FailedStart(slot, "fork");
  }
  slot.pid = pid;
  children_.emplace(pid, Child{cell, record_pipe[0], control_pipe[1], Clock::now(), 0, slot.board,
                               CellReportReader(control_pipe[1])});
  Log().info("supervisor: {} {} started{}", Name(cell), pid,
             run.restarts > 0 ? " (restart " + std::to_string(run.restarts) + ")" : "");
}

void CellSupervisor::FailedStart(Slot& slot, const char* what) {
  Log().error("supervisor: {}: {}; trying again in {} ms", what, std::strerror(errno),
              slot.backoff.count());
  slot.restart_at = Clock::now() + slot.backoff;
  slot.backoff = std::min(slot.backoff * 2, options_.max_backoff);
}

pid_t CellSupervisor::ForkDirectly(const ServingRun& run, int board, const int record_pipe[2],
                                   const int control_pipe[2]) {
  const pid_t supervisor = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  // The serving process drains and ends if the supervisor dies, even of SIGKILL.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != supervisor) ::_exit(0);  // it died before prctl took effect
  ::close(record_pipe[0]);                    // the supervisor's ends
  ::close(control_pipe[1]);
  ::close(signal_fd_);
  const int record_fd = record_pipe[1], control_fd = control_pipe[0];
  for (const auto& [other, sibling] : children_) {
    ::close(sibling.record_fd);
    ::close(sibling.control_fd);
  }
  if (preloaded_ != nullptr) {  // not this process's to kill
    preloaded_->MarkExited();
    preloaded_.reset();
  }
  SetCrashRecordFd(record_fd);
  if (Board(board) != nullptr) Board(board)->Attach();
  ServingRun serving = run;
  serving.control_fd = control_fd;
  ::_exit(serve_(serving));
}

bool CellSupervisor::OnPreloadedExit(pid_t pid, int status) {
  if (preloaded_ == nullptr || pid != preloaded_->pid()) return false;
  preloaded_->MarkExited();
  preloaded_.reset();
  if (stopping_ == 0) {
    Log().error(
        "supervisor: the preloaded process died ({}); serving processes are forked "
        "directly from now on",
        DescribeWaitStatus(status));
  }
  return true;
}

bool CellSupervisor::Adopt(int cell) {
  const pid_t spare = spare_slot_.pid;
  if (spare == 0) return false;
  Child& child = children_.at(spare);
  if (!WriteCellCommand(child.control_fd, CellCommand::Serve(cell)).ok()) {
    return false;  // it is dying: its exit comes next
  }
  child.cell = cell;
  child.started = Clock::now();  // a crash loop is timed from serving, not from waiting
  slots_[cell].pid = spare;
  std::swap(slots_[cell].board, spare_slot_.board);  // the dead cell's board is free now
  spare_slot_.pid = 0;
  return true;
}

void CellSupervisor::Quarantine(const std::string& model) {
  relay_.Quarantined(model);
  for (const auto& [pid, child] : children_) {
    WriteCellCommand(child.control_fd, CellCommand::Quarantine(model, run_.quarantined.at(model)))
        .IgnoreError();  // one that is gone does not need it
  }
}

void CellSupervisor::OnExit(pid_t pid, int status) {
  auto found = children_.find(pid);
  if (found == children_.end()) return;
  ReadReports(pid);  // what it said before it died counts
  Child child = std::move(found->second);
  children_.erase(found);
  relay_.Gone(ProcessOf(pid, child), DescribeWaitStatus(status), Processes());
  Slot& slot = SlotOf(child.cell);
  slot.pid = 0;
  std::string record;
  if (child.record_fd >= 0) {
    record = ReadAvailable(child.record_fd);
    ::close(child.record_fd);
  }
  ::close(child.control_fd);
  if (stopping_ != 0) {
    Log().info("supervisor: {} stopped ({})", Name(child.cell), DescribeWaitStatus(status));
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (exit_code_ == 0) exit_code_ = code;
    return;
  }
  // Killed without a word (SIGKILL), or a crash on a thread that ran nothing
  // chorus knows of (a kernel's worker thread): what every thread ran. An exit
  // is chorus' own decision or os._exit, which records itself.
  const bool named = record.find_first_not_of("\n") != std::string::npos;
  if (!named && Board(child.board) != nullptr && WIFSIGNALED(status)) {
    record = Board(child.board)->RunningNow();
    if (!record.empty()) Log().error("supervisor: the serving process was running: {}", record);
  }
  if (Board(child.board) != nullptr) Board(child.board)->Clear();
  const Clock::time_point now = Clock::now();
  if (now - child.started >= options_.stable_after) slot.backoff = options_.first_backoff;
  run_.restarts += 1;
  run_.last_exit = DescribeWaitStatus(status);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
    // Nothing in the process could report it: the OOM killer, or kill -9.
    run_.last_exit += " (killed from outside: out of memory? peak RSS " +
                      std::to_string(static_cast<int64_t>(child.peak_mib)) + " MiB)";
  }
  for (const std::string& model : history_.Record(record, run_.last_exit, &run_)) {
    Quarantine(model);
  }
  if (child.cell != kSpare && Adopt(child.cell)) {
    // The new spare waits as the dead cell's restart would: a crash loop slows.
    spare_slot_.restart_at = now + slot.backoff;
    Log().error("supervisor: {} died ({}); the spare {} serves in its place, a new spare in {} ms",
                Name(child.cell), run_.last_exit, slots_[child.cell].pid, slot.backoff.count());
  } else {
    slot.restart_at = now + slot.backoff;
    Log().error("supervisor: {} died ({}); restart {} in {} ms", Name(child.cell), run_.last_exit,
                run_.restarts, slot.backoff.count());
  }
  slot.backoff = std::min(slot.backoff * 2, options_.max_backoff);
}

void CellSupervisor::Tick() {
  for (auto& [pid, child] : children_) {
    if (StatusOr<double> peak = PeakResidentMiB(pid); peak.ok()) child.peak_mib = *peak;
  }
  if (stopping_ != 0 || StopPending()) return;  // the stop first: nothing starts for nothing
  const Clock::time_point now = Clock::now();
  for (size_t cell = 0; cell < slots_.size(); ++cell) {
    if (slots_[cell].pid == 0 && slots_[cell].restart_at <= now) Start(static_cast<int>(cell));
  }
  if (options_.spare && spare_slot_.pid == 0 && spare_slot_.restart_at <= now) Start(kSpare);
}

Clock::time_point CellSupervisor::NextTick() const {
  // Every second: the children's peak memory. If the kernel's OOM killer ends
  // one (SIGKILL, no report of its own), this is what the log can say.
  Clock::time_point next = Clock::now() + std::chrono::seconds(1);
  if (stopping_ != 0) return next;  // nothing restarts
  for (const Slot& slot : slots_) {
    if (slot.pid == 0) next = std::min(next, slot.restart_at);
  }
  if (options_.spare && spare_slot_.pid == 0) next = std::min(next, spare_slot_.restart_at);
  return next;
}

ChangeRelay::Process CellSupervisor::ProcessOf(pid_t pid, const Child& child) const {
  if (child.cell == kSpare) {
    return {pid, child.control_fd, "the spare", static_cast<int>(slots_.size())};
  }
  return {pid, child.control_fd, "cell " + std::to_string(child.cell), child.cell};
}

ChangeRelay::Processes CellSupervisor::Processes() const {
  ChangeRelay::Processes processes;
  for (const auto& [pid, child] : children_) processes.push_back(ProcessOf(pid, child));
  return processes;
}

void CellSupervisor::MakeChangesDir() {
  StatusOr<ScopedTempDir> made = ScopedTempDir::Create("chorus-changes-");
  if (!made.ok()) {
    // The serving processes then refuse repository load and unload calls.
    Log().error("supervisor: no folder for repository changes: {}", made.status().ToString());
    return;
  }
  changes_dir_ = std::move(*made);
  run_.changes_dir = changes_dir_.path();
}

void CellSupervisor::Wait(Clock::time_point until) {
  std::vector<pollfd> watched{{signal_fd_, POLLIN, 0}};
  std::vector<pid_t> whose;
  for (const auto& [pid, child] : children_) {
    if (!child.reports_open) continue;
    watched.push_back({child.control_fd, POLLIN, 0});
    whose.push_back(pid);
  }
  const int64_t left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
  const int timeout = static_cast<int>(std::clamp<int64_t>(left, 0, 3600000));
  if (::poll(watched.data(), watched.size(), timeout) <= 0) return;
  for (size_t i = 1; i < watched.size(); ++i) {
    if (watched[i].revents != 0) ReadReports(whose[i - 1]);
  }
}

void CellSupervisor::ReadReports(pid_t pid) {
  auto found = children_.find(pid);
  if (found == children_.end() || !found->second.reports_open) return;
  std::vector<StatusOr<CellReport>> reports;
  Child& child = found->second;
  child.reports_open = child.reports.ReadAvailable(
      [&](const StatusOr<CellReport>& report) { reports.push_back(report); });
  for (const StatusOr<CellReport>& report : reports) OnReport(pid, report);
}

void CellSupervisor::OnReport(pid_t pid, const StatusOr<CellReport>& report) {
  if (!report.ok()) {
    Log().error("supervisor: {} {}: {}", Name(children_.at(pid).cell), pid,
                report.status().ToString());
    return;
  }
  if (report->kind == CellReport::Kind::kRequest) {
    relay_.Request(ProcessOf(pid, children_.at(pid)), report->id, report->change, Processes());
  } else {
    relay_.Applied(pid, report->id, report->status, Processes());
  }
}

int CellSupervisor::NextSignal() {
  signalfd_siginfo info{};
  while (true) {
    const ssize_t n = ::read(signal_fd_, &info, sizeof(info));
    if (n == sizeof(info)) return static_cast<int>(info.ssi_signo);
    if (n < 0 && errno == EINTR) continue;
    return 0;
  }
}

std::optional<int> CellSupervisor::OnSignal(int sig) {
  if (sig == SIGTERM || sig == SIGINT) {
    if (children_.empty()) {
      Log().info("supervisor: stopped while no serving process ran");
      return 0;
    }
    stopping_ = sig;
    preloaded_.reset();
    relay_.Stop();
    for (const auto& [pid, child] : children_) ::kill(pid, sig);
  } else if (sig == SIGCHLD) {
    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      if (!OnPreloadedExit(pid, status)) OnExit(pid, status);
    }
    if (stopping_ != 0 && children_.empty()) return exit_code_;
  }
  return std::nullopt;
}

void CellSupervisor::StartPreloaded() {
  if (!options_.preload) return;
  std::vector<CrashBoard*> boards;
  for (const auto& board : boards_) boards.push_back(board.get());
  StatusOr<std::unique_ptr<PreloadedForks>> started =
      PreloadedForks::Start(options_.preload, serve_, boards);
  if (started.ok()) preloaded_ = std::move(*started);
  if (!started.ok())
    Log().error("supervisor: no preloaded process: {}", started.status().ToString());
}

int CellSupervisor::Run() {
  const sigset_t signals = SupervisedSignals();
  ::sigprocmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a command to a process that just died
  StartPreloaded();            // before the signal fd: it is not the preloaded process's
  signal_fd_ = ::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) {
    Log().error("supervisor: signalfd: {}", std::strerror(errno));
    return 1;
  }
  Tick();  // every slot is due
  while (true) {
    Wait(NextTick());
    for (int sig; (sig = NextSignal()) != 0;) {
      if (std::optional<int> code = OnSignal(sig)) {
        ::close(signal_fd_);
        return *code;
      }
    }
    Tick();
  }
}

}  // namespace

std::vector<std::string> ModelsInCrashRecord(const std::string& record) {
  return NamesInCrashRecord(record, CrashLabel::Kind::kModel);
}

std::vector<std::string> JobsInCrashRecord(const std::string& record) {
  return NamesInCrashRecord(record, CrashLabel::Kind::kTrainingJob);
}

std::string DescribeWaitStatus(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return std::string("signal SIG") + (name ? name : std::to_string(sig).c_str());
  }
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

int Supervise(const SupervisorOptions& options,
              const std::function<int(const ServingRun&)>& serve) {
  return CellSupervisor(options, serve).Run();
}

}  // namespace chorus
