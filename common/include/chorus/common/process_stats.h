// What Linux reports about a process (/proc), for metrics, benchmarks and tests.
#ifndef CHORUS_COMMON_PROCESS_STATS_H_
#define CHORUS_COMMON_PROCESS_STATS_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"

namespace chorus {

// Resident set size (VmRSS) of process `pid`, or of this process when `pid` is
// 0, in MiB. NOT_FOUND when the process does not exist; INTERNAL when the
// kernel's report has no VmRSS (a zombie). Any thread.
StatusOr<double> ResidentMiB(pid_t pid = 0);
// The same for the peak resident set size so far (VmHWM).
StatusOr<double> PeakResidentMiB(pid_t pid = 0);
// The same for private writable memory, touched or not (VmData): what
// RLIMIT_DATA limits. Memory-mapped files (model weights) are not in it.
StatusOr<double> DataMiB(pid_t pid = 0);

// Hands the allocator's free memory back to the system (glibc's malloc_trim),
// so that RSS shows what is in use; for after freeing much at once (a
// training job). Takes milliseconds; any thread.
void ReleaseFreeMemory();

// Gives the allocator's free memory back once the process has gone quiet.
// glibc keeps what threads free in their arenas: a burst of requests leaves
// tens of MiB resident after it ends, which only malloc_trim returns. A
// thread checks every `period` whether NoteMemoryActivity() was called since
// its last look; after activity followed by one quiet period it releases once
// (ReleaseFreeMemory), so a busy process never pays for it.
class IdleMemoryReleaser {
 public:
  explicit IdleMemoryReleaser(std::chrono::milliseconds period);
  // Stops and joins the thread.
  ~IdleMemoryReleaser();
  IdleMemoryReleaser(const IdleMemoryReleaser&) = delete;
  IdleMemoryReleaser& operator=(const IdleMemoryReleaser&) = delete;

  // Times it has released so far. Any thread.
  int64_t releases() const { return releases_.load(); }

 private:
  void Run() CHORUS_EXCLUDES(mu_);

  const std::chrono::milliseconds period_;
  std::atomic<int64_t> releases_{0};
  Mutex mu_;
  CondVar stop_changed_;
  bool stopping_ CHORUS_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Work that may have allocated and freed much happened (a model ran): any
// thread, lock-free. IdleMemoryReleaser waits for these to stop.
void NoteMemoryActivity();

// Limits this process's private writable memory (RLIMIT_DATA) to `mib`:
// allocations past it fail (torch raises RuntimeError, Python MemoryError)
// instead of the process growing until the kernel's OOM killer ends it.
// Process-wide; INVALID_ARGUMENT when the process already uses more.
Status LimitDataMiB(int64_t mib);

}  // namespace chorus

#endif  // CHORUS_COMMON_PROCESS_STATS_H_
