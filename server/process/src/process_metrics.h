// The serving process's own figures on /metrics: restarts and memory.
#ifndef CHORUS_SERVER_PROCESS_SRC_PROCESS_METRICS_H_
#define CHORUS_SERVER_PROCESS_SRC_PROCESS_METRICS_H_

#include <cstdint>
#include <string>

namespace chorus {

// The supervisor's figures: chorus_server_restarts_total, and
// chorus_server_last_exit_info{reason="..."} after a restart.
std::string RenderRestartMetrics(int restarts, const std::string& last_exit);

// This process's memory: resident, private writable (what a memory limit
// counts) and the limit itself when one is set (`limit_mib` > 0).
std::string RenderProcessMetrics(int64_t limit_mib);

}  // namespace chorus

#endif  // CHORUS_SERVER_PROCESS_SRC_PROCESS_METRICS_H_
