#include "chorus/server/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
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
#include "chorus/common/logging.h"
#include "chorus/common/process_stats.h"

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

// Waits for the next supervised signal until `until`; 0 at the deadline.
int NextSignal(const sigset_t& signals, Clock::time_point until) {
  while (true) {
    const Clock::duration left = until - Clock::now();
    if (left <= Clock::duration::zero()) return 0;
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::min<Clock::duration>(left, std::chrono::hours(1)))
                           .count();
    const timespec wait{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    siginfo_t info;
    const int sig = ::sigtimedwait(&signals, &info, &wait);
    if (sig > 0) return sig;
    if (errno != EAGAIN && errno != EINTR) return 0;
  }
}

// Everything readable from `fd` now (non-blocking; the writer is gone).
std::string ReadAvailable(int fd) {
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) text.append(buffer, n);
  return text;
}

// Runs the serving process until it ends; returns its wait status and, in
// `*record`, the crash record it left: the crashing thread's context, or when
// it died without a word (SIGKILL), what every thread was running per `board`
// (may be null). `*stopped` is set when a stop signal came (and was forwarded)
// meanwhile.
int RunOnce(const sigset_t& signals, const std::function<int(const ServingRun&)>& serve,
            const ServingRun& run, CrashBoard* board, int* stopped, std::string* record,
            double* peak_mib) {
  int record_pipe[2];
  if (::pipe2(record_pipe, O_CLOEXEC | O_NONBLOCK) != 0) record_pipe[0] = record_pipe[1] = -1;
  const pid_t supervisor = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    Log().error("supervisor: fork: {}", std::strerror(errno));
    return W_EXITCODE(1, 0);
  }
  if (child == 0) {
    // The serving process drains and ends if the supervisor dies, even of SIGKILL.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != supervisor) ::_exit(0);  // it died before prctl took effect
    ::close(record_pipe[0]);
    SetCrashRecordFd(record_pipe[1]);
    if (board != nullptr) board->Attach();
    ::_exit(serve(run));
  }
  ::close(record_pipe[1]);
  *peak_mib = 0;
  Log().info("supervisor: serving process {} started{}", child,
             run.restarts > 0 ? " (restart " + std::to_string(run.restarts) + ")" : "");
  while (true) {
    // Every second, the child's peak memory: if the kernel's OOM killer ends
    // it (SIGKILL, no report of its own), this is what the log can say.
    const int sig = NextSignal(signals, Clock::now() + std::chrono::seconds(1));
    if (sig == 0) {
      if (StatusOr<double> peak = PeakResidentMiB(child); peak.ok()) *peak_mib = *peak;
      continue;
    }
    if (sig == SIGTERM || sig == SIGINT) {
      *stopped = sig;
      ::kill(child, sig);
      continue;
    }
    int status = 0;
    if (sig == SIGCHLD && ::waitpid(child, &status, WNOHANG) == child) {
      if (record_pipe[0] >= 0) {
        *record = ReadAvailable(record_pipe[0]);
        ::close(record_pipe[0]);
      }
      // Killed without a word (SIGKILL), or a crash on a thread that ran
      // nothing chorus knows of (a kernel's worker thread): what every thread
      // ran. An exit is chorus' own decision or os._exit, which records itself.
      const bool named = record->find_first_not_of("\n") != std::string::npos;
      if (!named && board != nullptr && WIFSIGNALED(status)) {
        *record = board->RunningNow();
        if (!record->empty())
          Log().error("supervisor: the serving process was running: {}", *record);
      }
      if (board != nullptr) board->Clear();
      return status;
    }
  }
}

// Crash times per model and per training job; quarantines one that reaches
// the limit.
class CrashHistory {
 public:
  explicit CrashHistory(const SupervisorOptions& options) : options_(options) {}

  void Record(const std::string& record, const std::string& exit, ServingRun* run) {
    const std::string line = record.substr(0, record.find('\n'));
    for (const std::string& model : ModelsInCrashRecord(record)) {
      if (std::optional<std::string> why = Count("model " + model, exit, line)) {
        run->quarantined[model] = *why + "; load it explicitly to re-admit it";
        Log().error("supervisor: model {} {}", model, run->quarantined[model]);
      }
    }
    for (const std::string& job : JobsInCrashRecord(record)) {
      if (std::optional<std::string> why = Count("job " + job, exit, line)) {
        run->quarantined_jobs[job] = *why;
        Log().error("supervisor: training job {} {}", job, *why);
      }
    }
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
  const sigset_t signals = SupervisedSignals();
  ::sigprocmask(SIG_BLOCK, &signals, nullptr);
  ServingRun run;
  CrashHistory history(options);
  const std::unique_ptr<CrashBoard> board = CrashBoard::Create();
  std::chrono::milliseconds backoff = options.first_backoff;
  while (true) {
    const Clock::time_point started = Clock::now();
    int stopped = 0;
    std::string record;
    double peak_mib = 0;
    const int status = RunOnce(signals, serve, run, board.get(), &stopped, &record, &peak_mib);
    if (stopped != 0) {
      Log().info("supervisor: serving process stopped ({})", DescribeWaitStatus(status));
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (Clock::now() - started >= options.stable_after) backoff = options.first_backoff;
    run.restarts += 1;
    run.last_exit = DescribeWaitStatus(status);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
      // Nothing in the process could report it: the OOM killer, or kill -9.
      run.last_exit += " (killed from outside: out of memory? peak RSS " +
                       std::to_string(static_cast<int64_t>(peak_mib)) + " MiB)";
    }
    history.Record(record, run.last_exit, &run);
    Log().error("supervisor: serving process died ({}); restart {} in {} ms", run.last_exit,
                run.restarts, backoff.count());
    const Clock::time_point resume = Clock::now() + backoff;
    for (int sig; (sig = NextSignal(signals, resume)) != 0;) {
      if (sig == SIGTERM || sig == SIGINT) {
        Log().info("supervisor: stopped while no serving process ran");
        return 0;
      }
    }
    backoff = std::min(backoff * 2, options.max_backoff);
  }
}

}  // namespace chorus
