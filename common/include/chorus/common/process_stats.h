// What Linux reports about a process (/proc), for metrics, benchmarks and tests.
#ifndef CHORUS_COMMON_PROCESS_STATS_H_
#define CHORUS_COMMON_PROCESS_STATS_H_

#include <sys/types.h>

#include <cstdint>

#include "chorus/common/status.h"

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

// Limits this process's private writable memory (RLIMIT_DATA) to `mib`:
// allocations past it fail (torch raises RuntimeError, Python MemoryError)
// instead of the process growing until the kernel's OOM killer ends it.
// Process-wide; INVALID_ARGUMENT when the process already uses more.
Status LimitDataMiB(int64_t mib);

}  // namespace chorus

#endif  // CHORUS_COMMON_PROCESS_STATS_H_
