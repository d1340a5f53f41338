#ifndef CHORUS_SERVER_PROCESS_SRC_PORT_PICKER_H_
#define CHORUS_SERVER_PROCESS_SRC_PORT_PICKER_H_

#include <set>
#include <string>

namespace chorus {

// Picks the free TCP ports the supervisor's serving processes will listen
// on (a restarted one takes the same). A port is free only while nothing
// binds it, and the kernel may hand out a port it just released again: each
// pick is checked against the earlier ones, so that gRPC, metrics and HTTP
// never get the same port. Not thread-safe.
class PortPicker {
 public:
  explicit PortPicker(std::string host) : host_(std::move(host)) {}

  // The first of `count` consecutive ports on the host, free now and not
  // picked before; 0 if none was found.
  int Pick(int count = 1);

 private:
  const std::string host_;
  std::set<int> picked_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_PROCESS_SRC_PORT_PICKER_H_
