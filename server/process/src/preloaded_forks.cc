#include "server/process/src/preloaded_forks.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "chorus/common/logging.h"
#include "chorus/server/cell_control.h"

namespace chorus {
namespace {

constexpr size_t kMaxMessage = 1 << 20;  // a ServingRun's JSON (quarantine reasons)

// A datagram of `size` bytes at `data` with room for two fds beside it.
struct FdMessage {
  FdMessage(char* data, size_t size) : bytes{data, size} {
    header.msg_iov = &bytes;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof(control);
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;

  iovec bytes;
  char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr header{};
};

// Sends `text` with two fds in one datagram.
bool SendWithFds(int socket, const std::string& text, int first_fd, int second_fd) {
  FdMessage message(const_cast<char*>(text.data()), text.size());
  cmsghdr* fds = CMSG_FIRSTHDR(&message.header);
  fds->cmsg_level = SOL_SOCKET;
  fds->cmsg_type = SCM_RIGHTS;
  fds->cmsg_len = CMSG_LEN(2 * sizeof(int));
  const int both[2] = {first_fd, second_fd};
  std::memcpy(CMSG_DATA(fds), both, sizeof(both));
  return ::sendmsg(socket, &message.header, MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
}

// Receives a datagram and its two fds; false when the socket closed.
bool ReceiveWithFds(int socket, std::string* text, int* first_fd, int* second_fd) {
  text->resize(kMaxMessage);
  FdMessage message(text->data(), text->size());
  ssize_t n;
  while ((n = ::recvmsg(socket, &message.header, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  if (n <= 0) return false;
  text->resize(static_cast<size_t>(n));
  cmsghdr* fds = CMSG_FIRSTHDR(&message.header);
  if (fds == nullptr || fds->cmsg_type != SCM_RIGHTS ||
      fds->cmsg_len != CMSG_LEN(2 * sizeof(int))) {
    *first_fd = *second_fd = -1;
    return true;
  }
  int both[2];
  std::memcpy(both, CMSG_DATA(fds), sizeof(both));
  *first_fd = both[0];
  *second_fd = both[1];
  return true;
}

// In the serving process, once its middle parent is gone: the supervisor is
// its parent; it must die with it, as a directly forked one does.
void BecomeSupervisorsChild(pid_t supervisor) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (::getppid() != supervisor) {
    if (std::chrono::steady_clock::now() > deadline) ::_exit(0);  // the supervisor is gone
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != supervisor) ::_exit(0);
}

// The preloaded process's loop: a serving process per request, until the
// supervisor closes the socket.
[[noreturn]] void ServeForks(int socket, pid_t supervisor,
                             const std::function<int(const ServingRun&)>& serve,
                             const std::vector<CrashBoard*>& boards) {
  std::string text;
  int record_fd = -1, control_fd = -1;
  while (ReceiveWithFds(socket, &text, &record_fd, &control_fd)) {
    const size_t split = text.find('\n');
    StatusOr<ServingRun> run = DecodeServingRun(std::string_view(text).substr(split + 1));
    const int board = split == std::string::npos ? -1 : std::atoi(text.substr(0, split).c_str());
    bool answered = false;
    if (run.ok() && record_fd >= 0) {
      const pid_t middle = ::fork();
      if (middle == 0) {
        const pid_t serving = ::fork();
        if (serving == 0) {
          ::prctl(PR_SET_NAME, "chorus-server");  // its own name back, for ps and top
          BecomeSupervisorsChild(supervisor);
          ::close(socket);
          SetCrashRecordFd(record_fd);
          if (board >= 0 && board < static_cast<int>(boards.size()) && boards[board]) {
            boards[board]->Attach();
          }
          run->control_fd = control_fd;
          ::_exit(serve(*run));
        }
        ::send(socket, &serving, sizeof(serving), MSG_NOSIGNAL);  // -1: fork failed
        ::_exit(0);
      }
      if (middle > 0) answered = ::waitpid(middle, nullptr, 0) == middle;
    }
    if (!answered) {
      const pid_t refused = -1;
      ::send(socket, &refused, sizeof(refused), MSG_NOSIGNAL);
    }
    ::close(record_fd);
    ::close(control_fd);
  }
  ::_exit(0);
}

// This process's threads (/proc/self/status).
StatusOr<int> ThreadCount() {
  FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return UnavailableError("cannot read /proc/self/status");
  char line[256];
  int threads = -1;
  while (std::fgets(line, sizeof(line), status) != nullptr) {
    if (std::sscanf(line, "Threads: %d", &threads) == 1) break;
  }
  std::fclose(status);
  if (threads < 0) return UnavailableError("no thread count in /proc/self/status");
  return threads;
}

}  // namespace

StatusOr<std::unique_ptr<PreloadedForks>> PreloadedForks::Start(
    const std::function<void()>& preload, const std::function<int(const ServingRun&)>& serve,
    std::vector<CrashBoard*> boards) {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return UnavailableError(std::string("cannot become a subreaper: ") + std::strerror(errno));
  }
  int sockets[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets) != 0) {
    return UnavailableError(std::string("socketpair: ") + std::strerror(errno));
  }
  const pid_t supervisor = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return UnavailableError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != supervisor) ::_exit(0);
    ::prctl(PR_SET_NAME, "chorus-preload");
    ::close(sockets[0]);
    preload();
    // Forking is safe only while this process has one thread: if what it
    // loaded started one, the supervisor forks serving processes itself.
    if (StatusOr<int> threads = ThreadCount(); !threads.ok() || *threads != 1) ::_exit(1);
    ServeForks(sockets[1], supervisor, serve, boards);
  }
  ::close(sockets[1]);
  return std::unique_ptr<PreloadedForks>(new PreloadedForks(pid, sockets[0]));
}

PreloadedForks::~PreloadedForks() {
  ::close(socket_);
  if (!exited_) ::kill(pid_, SIGKILL);
}

StatusOr<pid_t> PreloadedForks::Fork(const ServingRun& run, int board, int record_fd,
                                     int control_fd) {
  const std::string request = std::to_string(board) + "\n" + EncodeServingRun(run);
  if (request.size() > kMaxMessage || !SendWithFds(socket_, request, record_fd, control_fd)) {
    return UnavailableError("the preloaded process is gone");
  }
  // Its preload may still run (seconds); then a fork answers within milliseconds.
  pollfd answer{socket_, POLLIN, 0};
  pid_t pid = -1;
  if (::poll(&answer, 1, 120000) != 1 || ::recv(socket_, &pid, sizeof(pid), 0) != sizeof(pid) ||
      pid <= 0) {
    return UnavailableError("the preloaded process did not fork a serving process");
  }
  return pid;
}

}  // namespace chorus
