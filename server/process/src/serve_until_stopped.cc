#include <signal.h>

#include <cstdio>

#include "chorus/common/logging.h"
#include "chorus/server/server.h"

namespace chorus {

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
  std::printf("chorus-server listening on port %d (metrics %d), http %d\n", (*server)->port(),
              (*server)->metrics_port(), (*server)->http_port());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  Log().info("received signal {}: draining", signal);
  (*server)->Shutdown();
  return 0;
}

}  // namespace chorus

extern "C" int ChorusServeUntilStopped(const chorus::ServerOptions* options) {
  return chorus::ServeUntilStopped(*options);
}
