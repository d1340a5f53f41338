#include "chorus/common/process_stats.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

namespace chorus {

namespace {

// The `field` line of /proc/<pid>/status ("VmRSS:     123456 kB") in MiB.
StatusOr<double> StatusFieldMiB(pid_t pid, const std::string& field) {
  const std::string path =
      pid == 0 ? "/proc/self/status" : "/proc/" + std::to_string(pid) + "/status";
  std::ifstream status(path);
  if (!status) return ErrnoError("reading " + path, errno);
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) {
      return std::strtod(line.c_str() + field.size(), nullptr) / 1024.0;
    }
  }
  return InternalError(path + " has no " + field);
}

}  // namespace

StatusOr<double> ResidentMiB(pid_t pid) { return StatusFieldMiB(pid, "VmRSS:"); }

StatusOr<double> PeakResidentMiB(pid_t pid) { return StatusFieldMiB(pid, "VmHWM:"); }

}  // namespace chorus
