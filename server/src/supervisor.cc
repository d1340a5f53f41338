#include "chorus/server/supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "chorus/common/logging.h"

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
    const auto left = std::max(Clock::duration::zero(), until - Clock::now());
    if (until != Clock::time_point::max() && left == Clock::duration::zero()) return 0;
    timespec wait{};
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(left);
    wait.tv_sec = until == Clock::time_point::max() ? 3600 : seconds.count();
    wait.tv_nsec =
        until == Clock::time_point::max()
            ? 0
            : std::chrono::duration_cast<std::chrono::nanoseconds>(left - seconds).count();
    siginfo_t info;
    const int sig = ::sigtimedwait(&signals, &info, &wait);
    if (sig > 0) return sig;
    if (errno != EAGAIN && errno != EINTR) return 0;
  }
}

// Runs the serving process until it ends; returns its wait status. `*stopped`
// is set when a stop signal came (and was forwarded) meanwhile.
int RunOnce(const sigset_t& signals, const std::function<int(const ServingRun&)>& serve,
            const ServingRun& run, int* stopped) {
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
    ::_exit(serve(run));
  }
  Log().info("supervisor: serving process {} started{}", child,
             run.restarts > 0 ? " (restart " + std::to_string(run.restarts) + ")" : "");
  while (true) {
    const int sig = NextSignal(signals, Clock::time_point::max());
    if (sig == SIGTERM || sig == SIGINT) {
      *stopped = sig;
      ::kill(child, sig);
      continue;
    }
    int status = 0;
    if (sig == SIGCHLD && ::waitpid(child, &status, WNOHANG) == child) return status;
  }
}

}  // namespace

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
  std::chrono::milliseconds backoff = options.first_backoff;
  while (true) {
    const Clock::time_point started = Clock::now();
    int stopped = 0;
    const int status = RunOnce(signals, serve, run, &stopped);
    if (stopped != 0) {
      Log().info("supervisor: serving process stopped ({})", DescribeWaitStatus(status));
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (Clock::now() - started >= options.stable_after) backoff = options.first_backoff;
    run.restarts += 1;
    run.last_exit = DescribeWaitStatus(status);
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
