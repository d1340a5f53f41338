#include "chorus/common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <memory>

namespace chorus {

spdlog::logger& Log() {
  static spdlog::logger* const logger = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    auto* created = new spdlog::logger("chorus", sink);
    created->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [chorus] [%^%l%$] %v");
    const char* level = std::getenv("CHORUS_LOG_LEVEL");
    created->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
    return created;
  }();
  return *logger;
}

}  // namespace chorus
