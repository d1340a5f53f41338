#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "chorus/common/logging.h"
#include "chorus/server/cell_control.h"
#include "chorus/server/server.h"

namespace chorus {
namespace {

void PrintListening(const Server& server) {
  std::printf("chorus-server listening on port %d (metrics %d), http %d", server.port(),
              server.metrics_port(), server.http_port());
  if (server.torchserve_inference_port() >= 0) {
    std::printf(", torchserve inference %d", server.torchserve_inference_port());
  }
  if (server.torchserve_management_port() >= 0) {
    std::printf(", torchserve management %d", server.torchserve_management_port());
  }
  if (server.torchserve_metrics_port() >= 0) {
    std::printf(", torchserve metrics %d", server.torchserve_metrics_port());
  }
  std::printf("\n");
  std::fflush(stdout);
}

// Carries out one of the supervisor's commands; false if the process must end.
bool Follow(Server& server, const StatusOr<CellCommand>& command) {
  if (!command.ok()) {
    Log().error("supervisor command ignored: {}", command.status().ToString());
    return true;
  }
  switch (command->kind) {
    case CellCommand::Kind::kQuarantine:
      server.Quarantine(command->model, command->why);
      return true;
    case CellCommand::Kind::kApply:
      server.ApplyChange(command->id, command->change);
      return true;
    case CellCommand::Kind::kAnswer:
      server.ChangeAnswered(command->id, command->status);
      return true;
    case CellCommand::Kind::kServe:
      break;
  }
  Log().info("the spare serves as cell {}", command->cell);
  if (Status listening = server.Listen(command->cell); !listening.ok()) {
    Log().error("the spare cannot serve: {}", listening.ToString());
    return false;
  }
  PrintListening(server);
  return true;
}

// Until `deadline` for poll(): -1 for none.
int PollTimeout(std::chrono::steady_clock::time_point deadline) {
  if (deadline == std::chrono::steady_clock::time_point::max()) return -1;
  const int64_t left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
          .count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 3600000));
}

// Waits for SIGTERM or SIGINT (the signal, or 0 if the process must end for
// another reason), following the supervisor's commands meanwhile and failing
// the repository calls its answer did not reach in time.
int WaitForStop(Server& server, const sigset_t& signals, int control_fd) {
  const int signal_fd = ::signalfd(-1, &signals, SFD_CLOEXEC);
  if (signal_fd < 0 && control_fd >= 0) {
    Log().error("cannot follow the supervisor's commands: signalfd failed");
    return 0;  // ends the process: the supervisor starts another
  }
  if (signal_fd < 0) {
    int signal = 0;
    sigwait(&signals, &signal);
    return signal;
  }
  CellCommandReader commands(control_fd);
  pollfd watched[2] = {{signal_fd, POLLIN, 0}, {control_fd, POLLIN, 0}};
  while (true) {
    const nfds_t count = watched[1].fd >= 0 ? 2 : 1;
    const int polled = ::poll(watched, count, PollTimeout(server.ExpireChanges()));
    if (polled <= 0) continue;  // EINTR, or a deadline to look at
    if (watched[0].revents & POLLIN) {
      signalfd_siginfo info{};
      const ssize_t n = ::read(signal_fd, &info, sizeof(info));
      ::close(signal_fd);
      return n == sizeof(info) ? static_cast<int>(info.ssi_signo) : SIGTERM;
    }
    if (count == 2 && watched[1].revents != 0) {
      bool keep = true;
      // The supervisor gone (the pipe closed): PR_SET_PDEATHSIG's SIGTERM follows.
      if (!commands.ReadAvailable(
              [&](const StatusOr<CellCommand>& c) { keep = keep && Follow(server, c); })) {
        watched[1].fd = -1;
      }
      if (!keep) {
        ::close(signal_fd);
        return 0;
      }
    }
  }
}

}  // namespace

int ServeUntilStopped(const ServerOptions& options) {
  // Signals are taken synchronously by this thread; every thread started
  // from here on inherits the blocked mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // A closed stdout (the listening line has no reader) must not kill us.
  ::signal(SIGPIPE, SIG_IGN);
  StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "chorus-server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  if (!options.defer_listening) PrintListening(**server);
  const int signal = WaitForStop(**server, signals, options.control_fd);
  if (signal != 0) Log().info("received signal {}: draining", signal);
  (*server)->Shutdown();
  return signal != 0 ? 0 : 1;
}

}  // namespace chorus

extern "C" int ChorusServeUntilStopped(const chorus::ServerOptions* options) {
  return chorus::ServeUntilStopped(*options);
}
