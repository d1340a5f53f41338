#include "server/process/src/process_metrics.h"

#include <sstream>

#include "chorus/common/process_stats.h"
#include "chorus/common/prometheus.h"

namespace chorus {

std::string RenderRestartMetrics(int restarts, const std::string& last_exit) {
  std::ostringstream out;
  AppendMetricHeader(out, "chorus_server_restarts_total", "counter",
                     "Serving processes the supervisor restarted after they died");
  out << "chorus_server_restarts_total " << restarts << "\n";
  if (restarts > 0) {
    AppendMetricHeader(out, "chorus_server_last_exit_info", "gauge",
                       "How the last serving process that died ended");
    out << "chorus_server_last_exit_info{reason=\"" << last_exit << "\"} 1\n";
  }
  return out.str();
}

std::string RenderProcessMetrics(int64_t limit_mib) {
  std::ostringstream out;
  auto gauge = [&](const char* name, const char* help, double mib) {
    AppendMetricHeader(out, name, "gauge", help);
    out << name << " " << static_cast<int64_t>(mib * (1 << 20)) << "\n";
  };
  if (StatusOr<double> resident = ResidentMiB(); resident.ok()) {
    gauge("process_resident_memory_bytes", "Resident memory of the serving process", *resident);
  }
  if (StatusOr<double> data = DataMiB(); data.ok()) {
    gauge("chorus_process_data_bytes",
          "Private writable memory of the serving process (what the memory limit counts)", *data);
  }
  if (limit_mib > 0) {
    gauge("chorus_process_memory_limit_bytes", "The serving process's memory limit",
          static_cast<double>(limit_mib));
  }
  return out.str();
}

}  // namespace chorus
