// What Linux reports about a process (/proc), for metrics, benchmarks and tests.
#ifndef CHORUS_COMMON_PROCESS_STATS_H_
#define CHORUS_COMMON_PROCESS_STATS_H_

#include <sys/types.h>

#include "chorus/common/status.h"

namespace chorus {

// Resident set size (VmRSS) of process `pid`, or of this process when `pid` is
// 0, in MiB. NOT_FOUND when the process does not exist; INTERNAL when the
// kernel's report has no VmRSS (a zombie). Any thread.
StatusOr<double> ResidentMiB(pid_t pid = 0);
// The same for the peak resident set size so far (VmHWM).
StatusOr<double> PeakResidentMiB(pid_t pid = 0);

}  // namespace chorus

#endif  // CHORUS_COMMON_PROCESS_STATS_H_
