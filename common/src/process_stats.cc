#include "chorus/common/process_stats.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

namespace chorus {

StatusOr<double> ResidentMiB(pid_t pid) {
  const std::string path =
      pid == 0 ? "/proc/self/status" : "/proc/" + std::to_string(pid) + "/status";
  std::ifstream status(path);
  if (!status) return ErrnoError("reading " + path, errno);
  std::string line;
  while (std::getline(status, line)) {
    // "VmRSS:     123456 kB"
    if (line.rfind("VmRSS:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  }
  return InternalError(path + " has no VmRSS");
}

}  // namespace chorus
