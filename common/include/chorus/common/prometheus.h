// Prometheus' text exposition format: the one place a metric family's header
// is written (the families themselves are where their figures are).
#ifndef CHORUS_COMMON_PROMETHEUS_H_
#define CHORUS_COMMON_PROMETHEUS_H_

#include <ostream>

namespace chorus {

// Writes a metric family's "# HELP" and "# TYPE" lines (type: counter, gauge,
// histogram).
void AppendMetricHeader(std::ostream& out, const char* name, const char* type, const char* help);

}  // namespace chorus

#endif  // CHORUS_COMMON_PROMETHEUS_H_
