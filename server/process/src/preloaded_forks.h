// The supervisor's preloaded process: a child that loads what every serving
// process needs (libtorch, the server library: ~190 MiB of relocations and
// static initialisation, written once) and then forks the serving processes,
// which share those pages copy-on-write instead of each loading its own
// (Android's zygote, gunicorn's --preload). It stays single-threaded, so
// forking it is safe. A serving process is forked twice and its middle
// parent exits: it becomes the supervisor's child (a subreaper), so the
// supervisor waits for it and sees how it ended as for any other.
#ifndef CHORUS_SERVER_PROCESS_SRC_PRELOADED_FORKS_H_
#define CHORUS_SERVER_PROCESS_SRC_PRELOADED_FORKS_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <vector>

#include "chorus/common/crash_report.h"
#include "chorus/common/status.h"
#include "chorus/server/supervisor.h"

namespace chorus {

class PreloadedForks {
 public:
  // Makes the calling process a subreaper and forks the preloaded process,
  // which runs `preload` once and then forks serving processes that run
  // `serve`. `boards` (one per serving process the supervisor may run) are
  // mapped before the fork, so every serving process can attach its own.
  static StatusOr<std::unique_ptr<PreloadedForks>> Start(
      const std::function<void()>& preload, const std::function<int(const ServingRun&)>& serve,
      std::vector<CrashBoard*> boards);
  // Kills the preloaded process unless it exited (the serving processes live on).
  ~PreloadedForks();
  PreloadedForks(const PreloadedForks&) = delete;
  PreloadedForks& operator=(const PreloadedForks&) = delete;

  // Forks a serving process that runs `run` with `record_fd` as its crash
  // record, `control_fd` as run.control_fd and boards[board] attached; the
  // fds are the caller's still (it closes them). Returns its pid, a child of
  // the caller. UNAVAILABLE if the preloaded process is gone or does not answer.
  StatusOr<pid_t> Fork(const ServingRun& run, int board, int record_fd, int control_fd);

  pid_t pid() const { return pid_; }
  // The caller reaped it (it died): nothing is left to kill.
  void MarkExited() { exited_ = true; }

 private:
  PreloadedForks(pid_t pid, int socket) : pid_(pid), socket_(socket) {}
  pid_t pid_;
  int socket_;  // SOCK_SEQPACKET to the preloaded process
  bool exited_ = false;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_PROCESS_SRC_PRELOADED_FORKS_H_
