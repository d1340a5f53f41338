// What Linux reports about a process (/proc), for metrics, benchmarks and tests.
#ifndef CHORUS_COMMON_PROCESS_STATS_H_
#define CHORUS_COMMON_PROCESS_STATS_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>
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

// Which mapped files' pages PageOutMappedFiles gives back, by path.
using MappedFileFilter = std::function<bool(std::string_view path)>;

// Asks the kernel to reclaim the resident pages of the files this process
// maps whose path `matches` (madvise MADV_PAGEOUT, Linux 5.4+): contents never
// change (a page touched again is read back), so it is for libraries whose
// code cannot run here (GPU libraries on a host without a GPU), which loading
// touched. Returns the MiB of file pages this process stopped mapping;
// UNIMPLEMENTED on a kernel without MADV_PAGEOUT. Tens of ms; any thread.
StatusOr<double> PageOutMappedFiles(const MappedFileFilter& matches);

// Gives the allocator's free memory back once the process has gone quiet.
// glibc keeps what threads free in their arenas: a burst of requests leaves
// tens of MiB resident after it ends, which only malloc_trim returns. A
// thread checks every `period` whether NoteMemoryActivity() was called since
// its last look; after activity followed by one quiet period it releases once
// (ReleaseFreeMemory), so a busy process never pays for it. With `page_out`,
// each release also pages out the mapped files it matches (PageOutMappedFiles),
// and so does every 10 quiet periods after it: pages another process mapped
// too are not reclaimed, and become this one's own when that process exits.
class IdleMemoryReleaser {
 public:
  explicit IdleMemoryReleaser(std::chrono::milliseconds period, MappedFileFilter page_out = {});
  // Stops and joins the thread.
  ~IdleMemoryReleaser();
  IdleMemoryReleaser(const IdleMemoryReleaser&) = delete;
  IdleMemoryReleaser& operator=(const IdleMemoryReleaser&) = delete;

  // Times it has released so far. Any thread.
  int64_t releases() const { return releases_.load(); }

 private:
  void Run() CHORUS_EXCLUDES(mu_);

  void Release();
  void PageOut();

  const std::chrono::milliseconds period_;
  const MappedFileFilter page_out_;
  const uint64_t activity_at_start_;  // NoteMemoryActivity's count at construction
  // Touched by thread_ only: the first page-out is logged; an UNIMPLEMENTED one
  // (an old kernel) is not tried again.
  bool paged_out_logged_ = false;
  bool page_out_works_ = true;
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
