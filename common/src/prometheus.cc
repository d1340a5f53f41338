#include "chorus/common/prometheus.h"

namespace chorus {

void AppendMetricHeader(std::ostream& out, const char* name, const char* type, const char* help) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

}  // namespace chorus
