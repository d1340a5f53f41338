#include "server/process/src/port_picker.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace chorus {
namespace {

// Binds `port` on `host` (0: any) and returns the port bound; 0 if it is in use.
int BindPort(const std::string& host, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) address.sin_addr.s_addr = 0;
  socklen_t length = sizeof(address);
  int bound = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    bound = ntohs(address.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return bound;
}

}  // namespace

int PortPicker::Pick(int count) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int first = BindPort(host_, 0);
    if (first == 0) return 0;
    int free = 0;
    while (free < count && first + free < 65536 && picked_.count(first + free) == 0 &&
           (free == 0 || BindPort(host_, first + free) == first + free)) {
      ++free;
    }
    if (free < count) continue;
    for (int port = first; port < first + count; ++port) picked_.insert(port);
    return first;
  }
  return 0;
}

}  // namespace chorus
