#include "chorus/common/process_stats.h"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "chorus/common/logging.h"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21  // Linux 5.4; older C library headers lack it
#endif

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

StatusOr<double> DataMiB(pid_t pid) { return StatusFieldMiB(pid, "VmData:"); }

void ReleaseFreeMemory() { ::malloc_trim(0); }

StatusOr<double> PageOutMappedFiles(const MappedFileFilter& matches) {
  CHORUS_ASSIGN_OR_RETURN(double before, StatusFieldMiB(0, "RssFile:"));
  std::ifstream maps("/proc/self/maps");
  if (!maps) return ErrnoError("reading /proc/self/maps", errno);
  std::string line;
  while (std::getline(maps, line)) {
    // "start-end perms offset dev inode path"; anonymous mappings have no path.
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode, path;
    fields >> range >> perms >> offset >> device >> inode >> path;
    if (path.empty() || path[0] != '/' || !matches(path)) continue;
    const uintptr_t start = std::stoull(range, nullptr, 16);
    const uintptr_t end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    if (::madvise(reinterpret_cast<void*>(start), end - start, MADV_PAGEOUT) != 0 &&
        errno == EINVAL) {
      return UnimplementedError("this kernel cannot page out (madvise MADV_PAGEOUT)");
    }
    // Other errors (ENOMEM: unmapped meanwhile) leave that mapping as it was.
  }
  CHORUS_ASSIGN_OR_RETURN(double after, StatusFieldMiB(0, "RssFile:"));
  return before > after ? before - after : 0.0;
}

namespace {
std::atomic<uint64_t> g_memory_activity{0};
}  // namespace

void NoteMemoryActivity() { g_memory_activity.fetch_add(1, std::memory_order_relaxed); }

IdleMemoryReleaser::IdleMemoryReleaser(std::chrono::milliseconds period, MappedFileFilter page_out)
    : period_(period),
      page_out_(std::move(page_out)),
      activity_at_start_(g_memory_activity.load()),
      thread_([this] { Run(); }) {}

IdleMemoryReleaser::~IdleMemoryReleaser() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_changed_.SignalAll();
  thread_.join();
}

void IdleMemoryReleaser::Run() {
  // From the count at construction, so that activity noted right after it
  // (whenever this thread starts) is released too.
  uint64_t seen = activity_at_start_;
  uint64_t released_at = seen;
  auto paged_out_at = std::chrono::steady_clock::time_point::max();  // not yet
  MutexLock lock(&mu_);
  while (!stopping_) {
    stop_changed_.WaitUntil(&mu_, std::chrono::steady_clock::now() + period_);
    if (stopping_) break;
    const uint64_t now = g_memory_activity.load();
    const auto time = std::chrono::steady_clock::now();
    if (now == seen && now != released_at) {  // quiet for a period, after activity
      Release();
      released_at = now;
      paged_out_at = time;
      releases_.fetch_add(1);
    } else if (now == seen && page_out_ && paged_out_at != decltype(paged_out_at)::max() &&
               time - paged_out_at >= 10 * period_) {
      PageOut();
      paged_out_at = time;
    }
    seen = now;
  }
}

void IdleMemoryReleaser::Release() {
  ReleaseFreeMemory();
  PageOut();
}

void IdleMemoryReleaser::PageOut() {
  if (!page_out_ || !page_out_works_) return;
  StatusOr<double> released = PageOutMappedFiles(page_out_);
  if (released.status().code() == StatusCode::kUnimplemented) page_out_works_ = false;
  if (!released.ok()) {
    if (!paged_out_logged_) Log().warn("idle memory release: {}", released.status().ToString());
  } else if (!paged_out_logged_) {
    Log().info("idle memory release: paged out {:.0f} MiB of mapped library pages", *released);
  }
  paged_out_logged_ = true;
}

Status LimitDataMiB(int64_t mib) {
  CHORUS_ASSIGN_OR_RETURN(double in_use, DataMiB());
  if (mib <= 0 || static_cast<double>(mib) <= in_use) {
    return InvalidArgumentError("a memory limit of " + std::to_string(mib) +
                                " MiB is not above what the process already uses (" +
                                std::to_string(static_cast<int64_t>(in_use)) + " MiB)");
  }
  if (mib > static_cast<int64_t>(RLIM_INFINITY >> 21)) {
    return InvalidArgumentError("a memory limit of " + std::to_string(mib) + " MiB is too large");
  }
  rlimit limit;
  if (::getrlimit(RLIMIT_DATA, &limit) != 0) return ErrnoError("getrlimit(RLIMIT_DATA)", errno);
  limit.rlim_cur = static_cast<rlim_t>(mib) << 20;
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_cur > limit.rlim_max) {
    return InvalidArgumentError("a memory limit of " + std::to_string(mib) +
                                " MiB is above this process's hard limit (" +
                                std::to_string(limit.rlim_max >> 20) + " MiB)");
  }
  if (::setrlimit(RLIMIT_DATA, &limit) != 0) return ErrnoError("setrlimit(RLIMIT_DATA)", errno);
  return OkStatus();
}

}  // namespace chorus
