// Logging for chorus internals: one spdlog logger named "chorus".
//
// Level comes from CHORUS_LOG_LEVEL (trace, debug, info, warn, error, off; default
// info). Safe from any thread. Python tracebacks are logged here, never sent to
// clients.
#ifndef CHORUS_COMMON_LOGGING_H_
#define CHORUS_COMMON_LOGGING_H_

#include <spdlog/spdlog.h>

namespace chorus {

// The process-wide chorus logger; created on first use.
spdlog::logger& Log();

}  // namespace chorus

#endif  // CHORUS_COMMON_LOGGING_H_
